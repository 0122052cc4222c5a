"""The stack file edit: one block written, every other line (comments included) kept."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
import yaml

from serving.release.stack import KEY, Reference, StackError, read_reference, removed_text, write_reference
from tests.release.conftest import Workspace

DIGEST = "sha256:" + "ab" * 32
URI = "s3://gpu-serving-models/prod/sha256-" + "ab" * 32


def _added_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    return [line[2:] for line in diff if line.startswith("+ ")], [line[2:] for line in diff if line.startswith("- ")]


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_first_release_adds_one_block_and_keeps_everything_else(workspace: Workspace, env: str) -> None:
    stack = workspace.stack(env)
    before = stack.read_text()
    assert write_reference(stack, Reference(URI, DIGEST, 1234))
    after = stack.read_text()
    added, removed = _added_lines(before, after)
    assert removed == []
    assert [line.strip() for line in added[1:]] == [f"{KEY}:", f"uri: {URI}", f"digest: {DIGEST}", "sizeBytes: 1234"]
    assert added[0].strip().startswith("# The model release Triton serves")
    expected = yaml.safe_load(before)
    expected["config"][KEY] = {"uri": URI, "digest": DIGEST, "sizeBytes": 1234}
    assert yaml.safe_load(after) == expected
    assert read_reference(stack) == Reference(URI, DIGEST, 1234)


def test_a_new_release_replaces_only_the_three_fields(workspace: Workspace) -> None:
    stack = workspace.stack("prod")
    write_reference(stack, Reference(URI, DIGEST, 1234))
    before = stack.read_text()
    digest, uri = "sha256:" + "cd" * 32, "s3://gpu-serving-models/prod/sha256-" + "cd" * 32
    assert write_reference(stack, Reference(uri, digest, 99))
    added, removed = _added_lines(before, stack.read_text())
    assert sorted(line.strip() for line in removed) == sorted([f"uri: {URI}", f"digest: {DIGEST}", "sizeBytes: 1234"])
    assert sorted(line.strip() for line in added) == sorted([f"uri: {uri}", f"digest: {digest}", "sizeBytes: 99"])
    assert not write_reference(stack, Reference(uri, digest, 99))  # the same release again: no change


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_removing_the_first_release_gives_back_the_file_before_it(workspace: Workspace, env: str) -> None:
    stack = workspace.stack(env)
    before = stack.read_text()
    assert removed_text(stack, before) == before  # no release: nothing to remove
    write_reference(stack, Reference(URI, DIGEST, 1234))
    assert removed_text(stack, stack.read_text()) == before


def test_removing_a_block_written_by_hand_keeps_the_comments_around_it(tmp_path: Path) -> None:
    stack = tmp_path / "Pulumi.x.yaml"
    text = f"config:\n  # mine\n  {KEY}: {{uri: x}}  # by hand\n  # the next key\n  gpu-serving:delivery: argocd\n"
    assert removed_text(stack, text) == "config:\n  # mine\n  # the next key\n  gpu-serving:delivery: argocd\n"


def test_a_flow_style_block_written_by_hand_is_replaced(workspace: Workspace) -> None:
    stack = workspace.stack("dev")
    text = stack.read_text().replace(
        "  gpu-serving:triton:\n", f"  {KEY}: {{uri: x, digest: y}}  # by hand\n  gpu-serving:triton:\n"
    )
    stack.write_text(text)
    write_reference(stack, Reference(URI, DIGEST, 5))
    assert read_reference(stack) == Reference(URI, DIGEST, 5)
    assert "# by hand" not in stack.read_text()


def test_a_stack_without_the_triton_key_is_refused_unchanged(tmp_path: Path) -> None:
    stack = tmp_path / "Pulumi.x.yaml"
    stack.write_text("config:\n  gpu-serving:delivery: argocd\n")
    with pytest.raises(StackError, match=f"{stack}: config key gpu-serving:triton not found"):
        write_reference(stack, Reference(URI, DIGEST, 1))
    assert stack.read_text() == "config:\n  gpu-serving:delivery: argocd\n"


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ("{uri: s3://bkt/p/sha256-" + "ab" * 32 + ", digest: sha256:12, sizeBytes: 1}", "digest"),
        ("{uri: s3://bkt/p/sha256-" + "cd" * 32 + ", digest: " + DIGEST + ", sizeBytes: 1}", "uri"),
        ("{uri: s3://bkt/p/sha256-" + "ab" * 32 + ", digest: " + DIGEST + ", sizeBytes: 0}", "sizeBytes"),
        ("{uri: s3://bkt/p/sha256-" + "ab" * 32 + ", digest: " + DIGEST + ", sizeBytes: 1, tag: v2}", "tag"),
    ],
)
def test_a_malformed_reference_names_the_file_and_field(tmp_path: Path, block: str, field: str) -> None:
    stack = tmp_path / "Pulumi.x.yaml"
    stack.write_text(f"config:\n  {KEY}: {block}\n")
    with pytest.raises(StackError, match=f"{stack}: {KEY}.{field}: "):
        read_reference(stack)
