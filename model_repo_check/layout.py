"""The repository layout Triton expects: <repo>/<model>/config.pbtxt and numeric version folders.

Triton silently skips a version folder whose name is not a number, and finds a model file
only under the file name its platform or backend expects; both are caught here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from model_repo_check.findings import Location, Report
from model_repo_check.pbtxt import ConfigParseError, FieldLocations, parse_config
from model_repo_check.release_schema import ReleaseSchema

CONFIG_FILE = "config.pbtxt"
# Folders Triton itself reads inside a model folder besides the versions.
AUXILIARY_DIRS = frozenset({"warmup"})
# platform -> (the backend that serves it, the model file name it looks for)
PLATFORMS: dict[str, tuple[str, str | None]] = {
    "onnxruntime_onnx": ("onnxruntime", "model.onnx"),
    "tensorrt_plan": ("tensorrt", "model.plan"),
    "pytorch_libtorch": ("pytorch", "model.pt"),
    "tensorflow_savedmodel": ("tensorflow", "model.savedmodel"),
    "tensorflow_graphdef": ("tensorflow", "model.graphdef"),
    "ensemble": ("", None),
}
BACKEND_FILES: dict[str, str] = {
    "onnxruntime": "model.onnx",
    "tensorrt": "model.plan",
    "pytorch": "model.pt",
    "python": "model.py",
    "openvino": "model.xml",
}


@dataclass
class ModelDir:
    """One parsed model folder: its config, where each field was written, its versions."""

    path: Path
    config: model_config_pb2.ModelConfig
    where: FieldLocations
    versions: dict[int, Path]
    model_file: str | None

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def backend(self) -> str:
        return self.config.backend or PLATFORMS.get(self.config.platform, ("", None))[0]


def model_folders(repository: Path) -> list[Path]:
    """Every folder directly under the repository: Triton tries to load each one as a model."""
    return sorted(p for p in repository.iterdir() if p.is_dir())


def load_model_dir(path: Path, report: Report, schema: ReleaseSchema) -> ModelDir | None:
    """Parse the config with `schema` and check the layout; None when the config is missing or does not parse."""
    config_path = path / CONFIG_FILE
    if not config_path.is_file():
        report.error("missing-config", f"model folder '{path.name}' has no {CONFIG_FILE}", Location(path))
        return None
    try:
        config, where = parse_config(config_path, schema)
    except ConfigParseError as err:
        report.error("parse", err.message, err.location)
        return None
    model = ModelDir(path, config, where, _versions(path, report), None)
    _check_name(model, report)
    model.model_file = _model_file_name(model, report)
    _check_version_contents(model, report)
    return model


def _versions(path: Path, report: Report) -> dict[int, Path]:
    versions: dict[int, Path] = {}
    for child in sorted(p for p in path.iterdir() if p.is_dir()):
        if child.name.isdecimal() and child.name.isascii():
            versions[int(child.name)] = child
        elif child.name not in AUXILIARY_DIRS:
            report.error(
                "version-not-numeric",
                f"version folder '{child.name}' is not a number; Triton ignores it (name versions 1, 2, ...)",
                Location(child),
            )
    if not versions:
        report.error("no-versions", f"model '{path.name}' has no numeric version folder", Location(path))
    return versions


def _check_name(model: ModelDir, report: Report) -> None:
    name = model.config.name
    if not name:
        report.warning(
            "name-missing",
            f"config has no `name`; Triton takes the folder name '{model.path.name}', write it explicitly",
            Location(model.config_path, 1, 1),
        )
    elif name != model.path.name:
        report.error(
            "name-mismatch",
            f"name '{name}' differs from its folder '{model.path.name}'; Triton refuses to load it",
            model.where.find("name"),
        )


def _model_file_name(model: ModelDir, report: Report) -> str | None:
    config = model.config
    if config.platform and config.platform not in PLATFORMS:
        known = ", ".join(sorted(PLATFORMS))
        report.error(
            "unknown-platform", f"unknown platform '{config.platform}' (known: {known})", model.where.find("platform")
        )
        return None
    if config.platform and config.backend and PLATFORMS[config.platform][0] != config.backend:
        report.error(
            "platform-backend",
            f"platform '{config.platform}' is served by backend '{PLATFORMS[config.platform][0]}', "
            f"not '{config.backend}'",
            model.where.find("backend"),
        )
        return None
    if not config.platform and not config.backend:
        report.error("no-backend", "config sets neither `platform` nor `backend`", Location(model.config_path, 1, 1))
        return None
    if config.platform == "ensemble":
        return None
    if config.default_model_filename:
        return config.default_model_filename
    default = PLATFORMS[config.platform][1] if config.platform else BACKEND_FILES.get(config.backend)
    if default is None:
        report.warning(
            "unknown-backend-file",
            f"backend '{config.backend}' has no known default model file; set `default_model_filename`",
            model.where.find("backend"),
        )
    return default


def _check_version_contents(model: ModelDir, report: Report) -> None:
    if model.model_file is None:
        return
    for version, folder in model.versions.items():
        if not (folder / model.model_file).exists():
            present = ", ".join(sorted(p.name for p in folder.iterdir())) or "nothing"
            report.error(
                "missing-model-file",
                f"version {version} has no '{model.model_file}' (the file the '{model.backend}' backend loads); "
                f"found: {present}",
                Location(folder),
            )
