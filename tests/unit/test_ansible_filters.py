"""The filter plugins that give Ansible the platform matrix and the typo check."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from ansible.errors import AnsibleFilterError

REPO = Path(__file__).resolve().parents[2]


def plugin(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"filter_plugin_{name}", REPO / "plugins/filter" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"filter_plugin_{name}"] = module
    spec.loader.exec_module(module)
    return module


matrix_filters = plugin("platform_matrix")
names_filters = plugin("variable_names")


def test_problems_start_with_the_variables_to_fix() -> None:
    # R535 is past its end of life: waived here, so that the Triton rule is the only one broken.
    messages = matrix_filters.platform_matrix_problems(
        {
            "triton_release": "24.10",
            "driver_version": "535.216.03",
            "driver_eol_waiver": {"branch": "535", "reason": "filter test"},
        },
        {"triton_release": "gpu_fleet_triton_release", "driver_version": "nvidia_driver_version"},
    )
    assert len(messages) == 1
    assert messages[0].startswith("gpu_fleet_triton_release, nvidia_driver_version: [triton_driver] ")


def test_empty_values_take_the_matrix_pins() -> None:
    assert matrix_filters.platform_matrix_problems({"gpu_product": ""}) == []


def test_unknown_choice_keys_are_refused() -> None:
    with pytest.raises(AnsibleFilterError, match="unknown key"):
        matrix_filters.platform_matrix_problems({"triton": "24.05"})


def test_a_broken_matrix_names_file_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "matrix.yml"
    bad.write_text("schema_version: 1\n")
    with pytest.raises(AnsibleFilterError, match=r"matrix.yml: <top level>: 'kubernetes' is a required property"):
        matrix_filters.platform_matrix(str(bad))


def test_typos_get_a_suggestion_and_foreign_names_are_left_alone() -> None:
    declared = names_filters.declared_role_variables(str(REPO / "roles"))
    assert "gpu_fleet_gpu_count" in declared and "nvidia_driver_hold" in declared
    messages = names_filters.unknown_role_variables(
        ["gpu_fleet_gpu_cont", "nvidia_driver_hold", "ansible_port", "nvidia_driver_zzz"],
        declared,
        ["gpu_fleet_", "nvidia_driver_"],
    )
    assert messages == [
        "gpu_fleet_gpu_cont: no role declares this variable (did you mean gpu_fleet_gpu_count?)",
        "nvidia_driver_zzz: no role declares this variable",
    ]
