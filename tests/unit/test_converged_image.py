"""The converged image's key (lab_fleet/converged.py): what shapes a node changes it, nothing else does."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lab_fleet import converged

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the node inputs and requirements.txt, to edit."""
    for name in converged.NODE_INPUTS:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "hosts.yml"))
        else:
            shutil.copy2(source, tmp_path / name)
    shutil.copy2(REPO / "requirements.txt", tmp_path / "requirements.txt")
    return tmp_path


def test_the_key_of_a_copy_is_the_repositorys(tree: Path) -> None:
    assert converged.node_key(tree) == converged.node_key(REPO)


@pytest.mark.parametrize(
    "edit",
    [
        "roles/nvidia_driver/defaults/main.yml",
        "playbooks/site.yml",
        "platform_matrix/matrix.yml",
        "inventories/lab/group_vars/gpu_nodes/connection.yml",
    ],
)
def test_a_change_of_a_yaml_inputs_data_changes_the_key_and_a_comment_does_not(tree: Path, edit: str) -> None:
    before = converged.node_key(tree)
    original = (tree / edit).read_text()
    (tree / edit).write_text(original + "\n# a comment changes nothing a node gets\n")
    assert converged.node_key(tree) == before
    (tree / edit).write_text(original + "\n---\nmore: data\n")
    assert converged.node_key(tree) != before


@pytest.mark.parametrize("edit", ["ansible.cfg", "roles/nvidia_driver/templates", "plugins/filter"])
def test_any_byte_of_another_input_changes_the_key(tree: Path, edit: str) -> None:
    before = converged.node_key(tree)
    target = tree / edit
    if target.is_dir():
        target = sorted(path for path in target.rglob("*") if path.is_file())[0]
    with target.open("a") as file:
        file.write("\n")
    assert converged.node_key(tree) != before


def test_an_ansible_pin_changes_the_key_and_another_pin_or_a_comment_does_not(tree: Path) -> None:
    requirements = tree / "requirements.txt"
    before = converged.node_key(tree)
    text = requirements.read_text()
    requirements.write_text(text.replace("onnx==", "onnx== ").replace("\n", "  # a comment\n", 1) + "fastapi2==1.0\n")
    assert converged.node_key(tree) == before
    assert "mitogen==0.3.54" in text
    requirements.write_text(text.replace("mitogen==0.3.54", "mitogen==0.3.55"))
    assert converged.node_key(tree) != before


def test_bytecode_docs_and_the_written_inventory_do_not_count(tree: Path) -> None:
    before = converged.node_key(tree)
    with (tree / "platform_matrix/README.md").open("a") as readme:
        readme.write("\nA line of docs.\n")
    (tree / "plugins/filter/__pycache__").mkdir(exist_ok=True)
    (tree / "plugins/filter/__pycache__/x.cpython-311.pyc").write_bytes(b"\0")
    (tree / "inventories/lab/hosts.yml").write_text("all: {}\n")
    assert converged.node_key(tree) == before
