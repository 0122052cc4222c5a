"""The release digest: deterministic, and it covers exactly the files Triton loads."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from serving.release.content import ContentError, read_content
from tests.release.conftest import ROOT


def _copy(tmp_path: Path, name: str = "repo") -> Path:
    target = tmp_path / name
    shutil.copytree(ROOT / "model_repository", target)
    return target


def test_digest_is_the_same_for_a_copy_written_in_another_order_at_another_time(tmp_path: Path) -> None:
    first = _copy(tmp_path, "first")
    files = sorted(path.relative_to(first) for path in first.rglob("*") if path.is_file())
    random.Random(7).shuffle(files)
    second = tmp_path / "second"
    for relative in files:  # another creation order, so another directory order on most file systems
        (second / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(first / relative, second / relative)
        os.utime(second / relative, (1_000_000, 1_000_000))
        os.chmod(second / relative, 0o600)  # another umask: no execute bit, like 0o644
    assert read_content(first).digest == read_content(second).digest
    assert read_content(first).size_bytes == read_content(second).size_bytes


def test_any_byte_of_any_file_changes_the_digest(tmp_path: Path) -> None:
    repository = _copy(tmp_path)
    original = read_content(repository).digest
    seen = {original}
    for entry in read_content(repository).files:
        path = repository / entry.path
        data = path.read_bytes()
        for offset in sorted({0, len(data) // 2, len(data) - 1}):
            path.write_bytes(data[:offset] + bytes([data[offset] ^ 1]) + data[offset + 1 :])
            digest = read_content(repository).digest
            assert digest not in seen, f"{entry.path} byte {offset}"
            seen.add(digest)
        path.write_bytes(data)
    assert read_content(repository).digest == original


def test_mode_name_and_new_files_change_the_digest(tmp_path: Path) -> None:
    repository = _copy(tmp_path)
    original = read_content(repository).digest
    labels = repository / "text-classifier" / "labels.txt"
    labels.chmod(0o755)
    assert read_content(repository).digest != original
    labels.chmod(0o644)
    labels.rename(repository / "text-classifier" / "labels2.txt")
    assert read_content(repository).digest != original
    labels2 = repository / "text-classifier" / "labels2.txt"
    labels2.rename(labels)
    (repository / "text-classifier" / "1" / "extra.bin").write_bytes(b"")
    assert read_content(repository).digest != original


def test_files_at_the_top_are_not_part_of_the_release(tmp_path: Path) -> None:
    """Triton loads folders only: the repository's README.md is not released."""
    repository = _copy(tmp_path)
    original = read_content(repository)
    assert all("/" in entry.path for entry in original.files)
    (repository / "README.md").write_text("changed\n")
    assert read_content(repository).digest == original.digest
    paths = {entry.path for entry in original.files}
    assert {"text-classifier/config.pbtxt", "text-classifier/1/model.onnx", "image-preprocess/1/model.onnx"} <= paths


def test_a_symbolic_link_is_refused_with_its_path(tmp_path: Path) -> None:
    repository = _copy(tmp_path)
    link = repository / "text-classifier" / "labels-link.txt"
    link.symlink_to(repository / "text-classifier" / "labels.txt")
    with pytest.raises(ContentError, match=f"{link}: a symbolic link"):
        read_content(repository)


def test_an_empty_or_missing_repository_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ContentError, match="model repository folder not found"):
        read_content(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ContentError, match="no model folder with files"):
        read_content(tmp_path / "empty")
