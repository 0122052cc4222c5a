"""The matrix's `serving_lab` section: its shape, its references, and the pip lines it prints."""

from __future__ import annotations

import pytest
import yaml

from platform_matrix import MatrixError, load
from platform_matrix.__main__ import main as cli
from platform_matrix.matrix import parse
from tests.unit.test_platform_matrix import mutate, raw


def test_the_lab_runs_one_of_the_deployed_releases() -> None:
    matrix = load()
    lab = matrix.serving_lab
    assert lab["triton"]["release"] in matrix.data["triton"]["releases"]
    assert lab["python_packages"]["tritonclient"] == lab["triton"]["server_version"]


@pytest.mark.parametrize(
    ("keys", "value", "key", "reason"),
    [
        (("serving_lab",), KeyError, "", "'serving_lab' is a required property"),
        (("serving_lab", "triton", "wheel_version"), 0.7, "serving_lab.triton.wheel_version", "not of type"),
        (("serving_lab", "triton", "release"), "24.1", "serving_lab.triton.release", "does not match"),
        (("serving_lab", "triton", "wheel"), KeyError, "serving_lab.triton", "'wheel' is a required property"),
        (("serving_lab", "triton", "port"), 8000, "serving_lab.triton", "Additional properties are not allowed"),
        (("serving_lab", "python_packages", "numpy"), "<2", "serving_lab.python_packages.numpy", "does not match"),
        (
            ("serving_lab", "python_packages", "onnxruntime"),
            KeyError,
            "serving_lab.python_packages",
            "'onnxruntime' is a required property",
        ),
        (("serving_lab", "debian_packages", "prometheus"), "2.42.0", "serving_lab.debian_packages.prometheus", "match"),
        (("serving_lab", "triton", "release"), "22.01", "serving_lab.triton.release", "is not one of triton.releases"),
        (
            ("serving_lab", "python_packages", "tritonclient"),
            "2.73.0",
            "serving_lab.python_packages.tritonclient",
            "is not the server version 2.51.0",
        ),
        (
            ("serving_lab", "python_packages", "nvidia-cuda-runtime-cu12"),
            "12.9.79",
            "serving_lab.python_packages.nvidia-cuda-runtime-cu12",
            "is not the CUDA 12.6.2 of release 24.10",
        ),
    ],
)
def test_a_malformed_serving_lab_section_names_the_key(
    keys: tuple[str, ...], value: object, key: str, reason: str
) -> None:
    with pytest.raises(MatrixError) as caught:
        parse(mutate(".".join(keys), value), "matrix.yml")
    assert (caught.value.path, caught.value.key) == ("matrix.yml", key)
    assert reason in caught.value.reason


def test_the_cli_prints_the_venv_requirements(capsys: pytest.CaptureFixture[str]) -> None:
    lab = load().serving_lab
    assert cli(["serving-lab-requirements"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{name}=={version}" for name, version in lab["python_packages"].items()]
    assert cli(["serving-lab-requirements", "--no-deps"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{lab['triton']['wheel']}=={lab['triton']['wheel_version']}"]


def test_the_cli_reports_a_malformed_matrix_instead_of_printing(tmp_path, capsys) -> None:
    data = raw()
    del data["serving_lab"]["python_packages"]
    bad = tmp_path / "matrix.yml"
    bad.write_text(yaml.safe_dump(data))
    assert cli(["serving-lab-requirements", "--file", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "serving_lab: 'python_packages' is a required property" in captured.err
