"""scripts/validate_model_repo: text for people, --format json for tools; exit 1 on failure.

Two engines: `rules` (the validator's own checks, the default) and `triton` (the real
tritonserver loads each model and gives its own verdict; model_repo_check/triton_engine.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from model_repo_check.release_schema import ReleaseSchemaError, load_schema, matrix_releases, newest_release
from model_repo_check.repository import validate_repository
from model_repo_check.target_env import TargetEnvError, gpus_for_env, release_for_env
from model_repo_check.triton_engine import StandInBuildError, Status, TritonReport, check_with_triton
from model_repo_check.tritonserver.processes import ServerError, sigterm_interrupts
from model_repo_check.tritonserver.server import TritonNotInstalledError

ROOT = Path(__file__).resolve().parents[1]
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="validate_model_repo",
        description="Check a Triton model repository before commit (configs, layout, models, deployment).",
    )
    parser.add_argument("repository", nargs="?", type=Path, default=ROOT / "model_repository")
    parser.add_argument(
        "--engine",
        choices=("rules", "triton"),
        default="rules",
        help="rules: the validator's checks (default); triton: the real tritonserver 2.51 of .venv-triton loads "
        "each model on this machine and gives its own verdict",
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument(
        "--env",
        help="target environment: GPUs per Triton pod and the Triton release it runs, from pulumi/Pulumi.<ENV>.yaml "
        "and its fleet inventory",
    )
    target.add_argument("--gpus", type=int, help="GPUs per Triton pod in the target (overrides --env)")
    parser.add_argument(
        "--triton-release",
        choices=list(matrix_releases()),
        help="parse configs with this release's model_config.proto (default: the --env's release, else the newest "
        "release in platform_matrix/matrix.yml)",
    )
    parser.add_argument("--pulumi-dir", type=Path, default=ROOT / "pulumi", help="where the Pulumi stack files are")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--strict", action="store_true", help="warnings fail too (triton engine: models it cannot check here)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.gpus is not None and args.gpus < 0:
        parser.error("--gpus must be 0 or more")
    if args.engine == "triton":
        if args.env is not None or args.gpus is not None or args.triton_release is not None:
            parser.error(
                "--env, --gpus and --triton-release set the target of the rules engine; "
                "--engine triton uses this machine and the server of .venv-triton"
            )
        return _triton(args)
    gpus, release = args.gpus, args.triton_release
    try:
        if args.env is not None:
            gpus = gpus_for_env(args.pulumi_dir, args.env)
            release = release or release_for_env(args.pulumi_dir, args.env)
        schema = load_schema(release or newest_release())
    except (TargetEnvError, ReleaseSchemaError) as err:
        print(f"validate_model_repo: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    report = validate_repository(args.repository, gpus, schema.release)
    failed = report.failed(args.strict)
    if args.format == "json":
        document = {
            "repository": str(report.repository),
            "target_gpus": gpus,
            "triton_release": schema.release,
            "tritonclient": schema.server_version,
            "strict": args.strict,
            "models": report.models,
            "errors": len(report.errors),
            "warnings": len(report.warnings),
            "ok": not failed,
            "findings": [finding.as_dict() for finding in report.findings],
        }
        print(json.dumps(document, indent=2))
    else:
        for finding in report.findings:
            print(finding)
        target = "any" if gpus is None else str(gpus)
        verdict = "FAILED" if failed else "ok"
        print(
            f"{report.repository}: {len(report.models)} model(s), {len(report.errors)} error(s), "
            f"{len(report.warnings)} warning(s), schema of {schema.label}, target GPUs per pod: {target}: {verdict}"
        )
    return EXIT_FAILED if failed else EXIT_OK


def _triton(args: argparse.Namespace) -> int:
    if not args.repository.is_dir():
        print(f"{args.repository}: model repository folder not found", file=sys.stderr)
        return EXIT_FAILED
    try:
        with sigterm_interrupts():
            report = check_with_triton(args.repository)
    except (TritonNotInstalledError, ServerError, StandInBuildError) as err:
        print(f"validate_model_repo: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    failed = report.failed(args.strict)
    if args.format == "json":
        print(json.dumps(_triton_document(report, args.strict, failed), indent=2))
    else:
        for verdict in report.verdicts:
            print(f"{report.repository}/{verdict}")
        release = f"release {report.release}" if report.release else "a release the platform matrix does not name"
        print(
            f"{report.repository}: tritonserver {report.server_version} ({release}), {len(report.verdicts)} model(s), "
            f"{report.count(Status.FAILED)} failed, {report.count(Status.NOT_CHECKABLE)} not checkable here: "
            f"{'FAILED' if failed else 'ok'}"
        )
    return EXIT_FAILED if failed else EXIT_OK


def _triton_document(report: TritonReport, strict: bool, failed: bool) -> dict[str, object]:
    return {
        "engine": "triton",
        "repository": str(report.repository),
        "server_version": report.server_version,
        "release": report.release,
        "strict": strict,
        "models": [verdict.model for verdict in report.verdicts],
        "failed": report.count(Status.FAILED),
        "not_checkable": report.count(Status.NOT_CHECKABLE),
        "ok": not failed,
        "verdicts": [
            {
                "model": v.model,
                "status": str(v.status),
                "message": v.message,
                "seconds": round(v.seconds, 3),
                "notes": list(v.notes),
            }
            for v in report.verdicts
        ],
    }
