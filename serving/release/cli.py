"""scripts/release_model: publish a validated model repository as a content-addressed release,
write its reference into the environment's stack file, and verify stack files against the
publication index. Exit 0 ok, 1 refused or failed, 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from model_repo_check.cli import main as validate_main
from serving.release.content import ContentError, read_content
from serving.release.index import INDEX_DIR, RecordError, write_record
from serving.release.stack import Reference, StackError, edited_text, release_uri, stack_path, store_of, write_reference
from serving.release.verify import check_stack

ROOT = Path(__file__).resolve().parents[2]
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="release_model",
        description="Model releases: a validated model repository, published under its content hash, "
        "referenced from the environment's stack file (serving/release/README.md).",
    )
    parser.add_argument("--pulumi-dir", type=Path, default=ROOT / "pulumi", help="where the Pulumi stack files are")
    parser.add_argument("--index", type=Path, default=INDEX_DIR, help="the publication index in git (model_releases/)")
    commands = parser.add_subparsers(dest="command", required=True)

    publish = commands.add_parser("publish", help="validate, publish, record, and write the stack file's reference")
    publish.add_argument("repository", nargs="?", type=Path, default=ROOT / "model_repository")
    publish.add_argument("--env", required=True, help="target environment: pulumi/Pulumi.<ENV>.yaml")
    publish.add_argument("--store", help="s3:// prefix to publish under (default: the env's triton.modelRepository)")
    publish.add_argument("--endpoint-url", help="S3 endpoint (default: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, AWS)")
    publish.add_argument("--strict", action="store_true", help="validator warnings refuse the release too")
    publish.add_argument("--dry-run", action="store_true", help="validate and print the release; publish nothing")

    digest = commands.add_parser("digest", help="print a repository's release digest, size and files (offline)")
    digest.add_argument("repository", nargs="?", type=Path, default=ROOT / "model_repository")

    verify = commands.add_parser("verify", help="every stack file's release is in the publication index")
    verify.add_argument("--env", action="append", help="only this environment (repeatable; default: every stack file)")
    verify.add_argument("--remote", action="store_true", help="also download each release and hash it again")
    verify.add_argument("--endpoint-url", help="S3 endpoint for --remote")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "publish":
            return _publish(args)
        if args.command == "digest":
            return _digest(args)
        return _verify(args)
    except (ContentError, StackError, RecordError) as err:
        print(f"release_model: error: {err}", file=sys.stderr)
        return EXIT_FAILED


def _digest(args: argparse.Namespace) -> int:
    content = read_content(args.repository)
    for entry in content.files:
        print(entry.line(), end="")
    print(f"{content.digest} {content.size_bytes} bytes, {len(content.files)} files")
    return EXIT_OK


def _publish(args: argparse.Namespace) -> int:
    from serving.release.store import Store, StoreError, client  # the S3 client only where it is used

    stack = stack_path(args.pulumi_dir, args.env)
    store = args.store.rstrip("/") if args.store else store_of(stack)
    validator_args = [str(args.repository), "--env", args.env, "--pulumi-dir", str(args.pulumi_dir)]
    status = validate_main([*validator_args, *(["--strict"] if args.strict else [])])
    if status != EXIT_OK:
        print(
            f"release_model: refused: {args.repository} does not pass scripts/validate_model_repo --env {args.env} "
            "(above); nothing was published and no file was changed",
            file=sys.stderr,
        )
        return EXIT_FAILED if status == 1 else EXIT_USAGE
    content = read_content(args.repository)
    reference = Reference(uri=release_uri(store, content.digest), digest=content.digest, size_bytes=content.size_bytes)
    edited_text(stack, stack.read_text(encoding="utf-8"), reference)  # refuse before publishing, not after
    print(f"release {content.digest}: {len(content.files)} files, {content.size_bytes} bytes -> {reference.uri}")
    if args.dry_run:
        print("dry run: nothing published, no file changed")
        return EXIT_OK
    try:
        uploaded = Store(client(args.endpoint_url)).publish(content, args.repository, reference.uri)
    except StoreError as err:
        print(f"release_model: error: {err}; nothing recorded, the stack file is unchanged", file=sys.stderr)
        return EXIT_FAILED
    print("published" if uploaded else "already published there (the store's release.json names this digest)")
    record = write_record(args.index, content, reference.uri)
    changed = write_reference(stack, reference)
    print(f"recorded {record}")
    print(f"{stack}: gpu-serving:modelRelease {'written' if changed else 'already names this release'}")
    print(f"next: make render-all && git add {record} {stack} deploy/ && git commit")
    return EXIT_OK


def _verify(args: argparse.Namespace) -> int:
    stacks = (
        [stack_path(args.pulumi_dir, env) for env in args.env]
        if args.env
        else sorted(args.pulumi_dir.glob("Pulumi.*.yaml"))
    )
    remote = None
    if args.remote:
        from serving.release.store import Store, client

        remote = Store(client(args.endpoint_url))
    failed = False
    for stack in stacks:
        problems, summary = check_stack(stack, args.index, remote)
        for problem in problems:
            print(problem, file=sys.stderr)
        print(f"{stack}: {'FAILED' if problems else 'ok'}: {summary}")
        failed |= bool(problems)
    return EXIT_FAILED if failed else EXIT_OK
