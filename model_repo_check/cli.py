"""scripts/validate_model_repo: text for people, --format json for tools; exit 1 on failure."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from model_repo_check.repository import validate_repository
from model_repo_check.target_env import TargetEnvError, gpus_for_env

ROOT = Path(__file__).resolve().parents[1]
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="validate_model_repo",
        description="Check a Triton model repository before commit (configs, layout, models, deployment).",
    )
    parser.add_argument("repository", nargs="?", type=Path, default=ROOT / "model_repository")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--env", help="target environment: GPUs per Triton pod from pulumi/Pulumi.<ENV>.yaml")
    target.add_argument("--gpus", type=int, help="GPUs per Triton pod in the target (overrides --env)")
    parser.add_argument("--pulumi-dir", type=Path, default=ROOT / "pulumi", help="where the Pulumi stack files are")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--strict", action="store_true", help="warnings fail too")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.gpus is not None and args.gpus < 0:
        parser.error("--gpus must be 0 or more")
    gpus = args.gpus
    if args.env is not None:
        try:
            gpus = gpus_for_env(args.pulumi_dir, args.env)
        except TargetEnvError as err:
            print(f"validate_model_repo: error: {err}", file=sys.stderr)
            return EXIT_USAGE
    report = validate_repository(args.repository, gpus)
    failed = report.failed(args.strict)
    if args.format == "json":
        document = {
            "repository": str(report.repository),
            "target_gpus": gpus,
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
            f"{len(report.warnings)} warning(s), target GPUs per pod: {target}: {verdict}"
        )
    return EXIT_FAILED if failed else EXIT_OK
