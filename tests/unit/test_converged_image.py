"""The converged image's key (lab_fleet/converged.py): what shapes a node changes it, nothing else does."""

from __future__ import annotations

import re
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


@pytest.mark.parametrize("edit", ["roles/k8s_addons/defaults/main.yml", "playbooks/k8s_addons.yml"])
def test_the_controller_only_add_ons_do_not_count_but_their_argument_specs_do(tree: Path, edit: str) -> None:
    before = converged.node_key(tree)
    with (tree / edit).open("a") as file:
        file.write("\n---\nmore: data\n")
    assert converged.node_key(tree) == before
    with (tree / "roles/k8s_addons/meta/argument_specs.yml").open("a") as file:
        file.write("\n---\nmore: data\n")
    assert converged.node_key(tree) != before


# A play, a role dependency or an include that runs the add-ons' role or playbook.
USES_ADDONS = re.compile(
    r"^\s*(?:-\s*)?(?:role|name|import_playbook|include_playbook|import_role|include_role)?:?\s*"
    r"['\"]?(?:\S*/)?k8s_addons(?:\.yml)?['\"]?\s*$",
    re.MULTILINE,
)


def test_no_play_that_reaches_a_node_runs_the_controller_only_add_ons() -> None:
    """The add-ons leave the key only while no node input runs their role or playbook: a play or
    role that did would put them on a node that the cached image does not reflect."""
    assert USES_ADDONS.search("  roles:\n    - role: k8s_addons\n")
    assert USES_ADDONS.search("- import_playbook: k8s_addons.yml\n")
    for file in converged._input_files(REPO):
        if file.suffix in (".yml", ".yaml") and not converged._controller_only(file.relative_to(REPO)):
            match = USES_ADDONS.search(file.read_text(encoding="utf-8"))
            assert match is None, f"{file.relative_to(REPO)} runs the add-ons: {match.group(0).strip()!r}"
