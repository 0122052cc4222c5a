"""Validate a whole model repository: layout, config rules, ONNX models, deployment rules."""

from __future__ import annotations

from pathlib import Path

from model_repo_check.config_rules import check_config
from model_repo_check.deployment import check_deployment
from model_repo_check.ensemble_rules import check_ensemble_members
from model_repo_check.findings import Location, Report
from model_repo_check.layout import ModelDir, load_model_dir, model_folders
from model_repo_check.onnx_model import check_onnx_version, onnx_path
from model_repo_check.release_schema import load_schema, newest_release


def validate_repository(repository: Path, gpus: int | None = None, release: str | None = None) -> Report:
    """Every check on every model. `gpus`: GPUs per Triton pod in the target, None when unknown;
    `release`: the Triton release whose model_config.proto the configs must parse with (default:
    the newest in the platform matrix)."""
    schema = load_schema(release or newest_release())
    report = Report(repository, schema.release)
    if not repository.is_dir():
        report.error("no-repository", "model repository folder not found", Location(repository))
        return report
    models: dict[str, ModelDir] = {}
    failed: set[str] = set()
    for folder in model_folders(repository):
        report.models.append(folder.name)
        errors_before = len(report.errors)
        model = load_model_dir(folder, report, schema)
        if model is None:
            failed.add(folder.name)
            continue
        check_config(model, report)
        check_deployment(model, gpus, report)
        if model.backend == "onnxruntime":
            for version, version_dir in model.versions.items():
                path = onnx_path(model, version_dir)
                if path.is_file():
                    check_onnx_version(model, version, path, report)
        models[folder.name] = model
        if len(report.errors) > errors_before:
            failed.add(folder.name)
    # Ensembles last: Triton checks them against their loaded members.
    for model in models.values():
        check_ensemble_members(model, models, failed, report)
    if not report.models:
        report.error("empty-repository", "the repository holds no model folder", Location(repository))
    return report
