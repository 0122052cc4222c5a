"""The release reference in a stack file: `gpu-serving:modelRelease` in pulumi/Pulumi.<env>.yaml.

    gpu-serving:modelRelease:
      uri: s3://gpu-serving-models/prod/sha256-<hex>
      digest: sha256:<hex>
      sizeBytes: 912345

The edit (writing the block, or removing it for a rollback to no release) is a text edit of that
one block, not a YAML round trip: PyYAML drops comments, and
ruamel.yaml (here only as ansible-lint's unpinned dependency) re-indents these files' block
sequences, drops the `---` line and folds long lines. After the edit both texts are parsed and
must differ in that key only; otherwise nothing is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from serving.release.content import DIGEST, prefix_of

KEY = "gpu-serving:modelRelease"
TRITON_KEY = "gpu-serving:triton"
REPOSITORY_FIELD = "modelRepository"
COMMENT = "# The model release Triton serves, written by scripts/release_model (serving/release/README.md)."
_S3_URI = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/[^\s]*)?$")


class StackError(ValueError):
    """The stack file cannot be read or edited; the message names the file and key."""


@dataclass(frozen=True)
class Reference:
    uri: str
    digest: str
    size_bytes: int


def stack_path(pulumi_dir: Path, env: str) -> Path:
    return pulumi_dir / f"Pulumi.{env}.yaml"


def _config(path: Path | str, text: str) -> dict[str, Any]:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise StackError(f"{path}: not valid YAML: {err}") from None
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict):
        raise StackError(f"{path}: the stack file has no `config:` mapping")
    return config


def _read(path: Path) -> str:
    if not path.is_file():
        raise StackError(f"{path}: stack file not found")
    return path.read_text(encoding="utf-8")


def store_of(path: Path) -> str:
    """The environment's release store: `gpu-serving:triton.modelRepository`, an `s3://` prefix."""
    triton = _config(path, _read(path)).get(TRITON_KEY)
    store = triton.get(REPOSITORY_FIELD) if isinstance(triton, dict) else None
    if not isinstance(store, str) or not _S3_URI.match(store.rstrip("/")):
        raise StackError(
            f"{path}: {TRITON_KEY}.{REPOSITORY_FIELD}: must be an s3:// prefix to publish to, got {store!r}"
        )
    return store.rstrip("/")


def release_uri(store: str, digest: str) -> str:
    return f"{store.rstrip('/')}/{prefix_of(digest)}"


def read_reference(path: Path) -> Reference | None:
    """The stack's release reference, None when the stack has none; malformed fields are errors."""
    return parse_reference(path, _read(path))


def parse_reference(path: Path | str, text: str) -> Reference | None:
    """The release reference of a stack file's text (`path` names it in messages: a file, or a
    file at a commit)."""
    value = _config(path, text).get(KEY)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise StackError(f"{path}: {KEY}: must be a mapping with uri, digest and sizeBytes, got {value!r}")
    unknown = sorted(set(value) - {"uri", "digest", "sizeBytes"})
    if unknown:
        raise StackError(f"{path}: {KEY}.{unknown[0]}: unknown field (known: uri, digest, sizeBytes)")
    digest, uri, size = value.get("digest"), value.get("uri"), value.get("sizeBytes")
    if not isinstance(digest, str) or not DIGEST.match(digest):
        raise StackError(f"{path}: {KEY}.digest: must be sha256:<64 hex>, got {digest!r}")
    if not isinstance(uri, str) or not _S3_URI.match(uri) or not uri.endswith(f"/{prefix_of(digest)}"):
        raise StackError(f"{path}: {KEY}.uri: must be s3://<bucket>/<prefix>/{prefix_of(digest)}, got {uri!r}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise StackError(f"{path}: {KEY}.sizeBytes: must be an integer >= 1, got {size!r}")
    return Reference(uri=uri, digest=digest, size_bytes=size)


def _block(indent: str, reference: Reference) -> list[str]:
    inner = indent + "  "
    return [
        f"{indent}{KEY}:\n",
        f"{inner}uri: {reference.uri}\n",
        f"{inner}digest: {reference.digest}\n",
        f"{inner}sizeBytes: {reference.size_bytes}\n",
    ]


def _end_of_block(lines: list[str], start: int, indent: int) -> int:
    """The index after the block of the key at `start`: up to the next line at its indent or less
    (a comment at that indent belongs to the next key); blank lines before it stay outside."""
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return end


def _key_line(lines: list[str], key: str) -> tuple[int, str] | None:
    pattern = re.compile(rf"^(\s+){re.escape(key)}:(\s|$)")
    for index, line in enumerate(lines):
        if match := pattern.match(line):
            return index, match.group(1)
    return None


def edited_text(path: Path, text: str, reference: Reference) -> str:
    """The stack file's text with the release block written (replaced, or added after Triton's)."""
    _config(path, text)
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    if found := _key_line(lines, KEY):
        start, indent = found
        end = _end_of_block(lines, start, len(indent))
        lines[start:end] = _block(indent, reference)
    elif found := _key_line(lines, TRITON_KEY):
        start, indent = found
        end = _end_of_block(lines, start, len(indent))
        lines[end:end] = [f"{indent}{COMMENT}\n", *_block(indent, reference)]
    else:
        raise StackError(f"{path}: config key {TRITON_KEY} not found: no place for {KEY}")
    new = "".join(lines)
    _config(path, new)
    expected = yaml.safe_load(text)
    expected["config"][KEY] = {"uri": reference.uri, "digest": reference.digest, "sizeBytes": reference.size_bytes}
    if yaml.safe_load(new) != expected:
        raise StackError(f"{path}: editing {KEY} would change other keys too; edit the file by hand")
    return new


def removed_text(path: Path, text: str) -> str:
    """The stack file's text without the release block (and the comment written above it): Triton
    reads `gpu-serving:triton.modelRepository` again. The text itself when it has no block."""
    config = _config(path, text)
    if KEY not in config:
        return text
    lines = text.splitlines(keepends=True)
    found = _key_line(lines, KEY)
    if found is None:
        raise StackError(f"{path}: {KEY} is not a line of its own; remove it by hand")
    start, indent = found
    end = _end_of_block(lines, start, len(indent))
    if start and lines[start - 1] == f"{indent}{COMMENT}\n":
        start -= 1
    new = "".join(lines[:start] + lines[end:])
    expected = yaml.safe_load(text)
    del expected["config"][KEY]
    if yaml.safe_load(new) != expected:
        raise StackError(f"{path}: removing {KEY} would change other keys too; edit the file by hand")
    return new


def write_reference(path: Path, reference: Reference) -> bool:
    """Write the reference; False when the stack already names exactly this release."""
    text = _read(path)
    new = edited_text(path, text, reference)
    if new == text:
        return False
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(new, encoding="utf-8")
    temporary.replace(path)
    return True
