"""Each environment's configs parse with the model_config.proto of the Triton release it runs."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
import yaml
from google.protobuf import descriptor
from tritonclient.grpc import model_config_pb2

from model_repo_check import validate_repository
from model_repo_check.cli import main
from model_repo_check.release_schema import (
    PB2_FILE,
    SCHEMAS,
    ReleaseSchemaError,
    load_schema,
    matrix_releases,
    newest_release,
)
from model_repo_check.target_env import TargetEnvError, release_for_env
from tests.model_repository.quickstart_models import build

ROOT = Path(__file__).resolve().parents[2]
PULUMI_DIR = ROOT / "pulumi"
ENVS = sorted(p.name.split(".")[1] for p in PULUMI_DIR.glob("Pulumi.*.yaml"))

TRT_MODEL = """name: "trt"
platform: "tensorrt_plan"
max_batch_size: 8
input [
  {{
    name: "INPUT0"
    data_type: TYPE_FP32
    dims: [ 3, 16, 16 ]
{extra}  }}
]
output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 16 ] }} ]
instance_group [ {{ kind: KIND_CPU }} ]
"""


def trt_repository(root: Path, extra: str) -> Path:
    """One TensorRT model (a stand-in plan file: the rules engine does not read it)."""
    (root / "trt/1").mkdir(parents=True)
    (root / "trt/1/model.plan").write_bytes(b"plan")
    (root / "trt/config.pbtxt").write_text(TRT_MODEL.format(extra=extra))
    return root


def errors(report: object) -> list[str]:
    return [str(f) for f in report.errors]  # type: ignore[attr-defined]


def test_every_matrix_release_has_its_schema_as_recorded_in_the_readme():
    table = (SCHEMAS / "README.md").read_text()
    for release, version in matrix_releases().items():
        source = SCHEMAS / release / PB2_FILE
        assert source.is_file(), f"{source} missing: run `make model-schemas`"
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        row = re.search(
            rf"^\| {re.escape(release)} \| {re.escape(version)} \| `[0-9a-f]{{64}}` \| `(\w+)` \|$", table, re.M
        )
        assert row, f"schemas/README.md has no row for {release} / {version}"
        assert row.group(1) == digest, f"{source} is not the file recorded in schemas/README.md"
        assert load_schema(release).server_version == version


def _fields(message: descriptor.Descriptor) -> dict[str, tuple[int, int, str]]:
    found = {}
    for item in message.fields:
        kind = (
            item.message_type.full_name if item.message_type else (item.enum_type.full_name if item.enum_type else "")
        )
        found[f"{message.full_name}.{item.name}"] = (item.number, item.type, kind)
    for nested in message.nested_types:
        found |= _fields(nested)
    return found


@pytest.mark.parametrize("release", list(matrix_releases()))
def test_release_fields_keep_number_and_type_in_the_installed_schema(release):
    """The parsed config crosses to the installed tritonclient's ModelConfig by its wire format."""
    installed = {}
    for message in model_config_pb2.DESCRIPTOR.message_types_by_name.values():
        installed |= _fields(message)
    schema = load_schema(release)
    for message in schema.file.message_types_by_name.values():
        for name, spec in _fields(message).items():
            assert installed.get(name) == spec, f"{name} of {schema.label} is {spec}, installed {installed.get(name)}"


def test_schemas_live_beside_the_installed_one():
    classes = {load_schema(release).model_config for release in matrix_releases()}
    assert len(classes) == len(matrix_releases())
    assert model_config_pb2.ModelConfig not in classes
    assert model_config_pb2.DESCRIPTOR.pool.FindMessageTypeByName("inference.ModelEnsembling").fields_by_name.get(
        "max_inflight_requests"
    ), "the default pool still holds the installed tritonclient's schema"
    assert "runtime" not in load_schema("23.09").message_descriptor("inference.ModelConfig").fields_by_name
    assert "runtime" in load_schema("24.05").message_descriptor("inference.ModelConfig").fields_by_name


def test_a_field_newer_than_the_release_fails_naming_it_and_passes_where_it_arrived(tmp_path):
    repo = trt_repository(tmp_path / "repo", "    is_non_linear_format_io: true\n")
    config = repo / "trt/config.pbtxt"
    assert errors(validate_repository(repo, None, "24.05")) == [
        f"{config}:9:5: error: is_non_linear_format_io is not a field of ModelInput in Triton 24.05 (tritonclient "
        "2.46.0); it arrived later, in Triton 24.10 (tritonclient 2.51.0): deploy that release to this environment "
        "first, or leave the field out [parse]"
    ]
    report = validate_repository(repo, None, "24.10")
    assert report.release == "24.10"
    assert errors(report) == []


@pytest.mark.parametrize(
    ("text", "older", "newer", "reason"),
    [
        ('runtime: "model.so"', "23.09", "24.05", "runtime is not a field of ModelConfig in Triton 23.09"),
        ("model_metrics { }", "24.10", "25.04", "model_metrics is not a field of ModelConfig in Triton 24.10"),
    ],
)
def test_top_level_fields_by_release(tmp_path, text, older, newer, reason):
    repo = trt_repository(tmp_path / "repo", "")
    config = repo / "trt/config.pbtxt"
    config.write_text(config.read_text() + text + "\n")
    if text.startswith("runtime"):
        (repo / "trt/model.so").write_bytes(b"")
    [error] = errors(validate_repository(repo, None, older))
    assert f"{config}:13:1: error: {reason} (tritonclient " in error
    assert f"it arrived later, in Triton {newer} (tritonclient {matrix_releases()[newer]})" in error
    assert errors(validate_repository(repo, None, newer)) == []


def test_a_field_no_matrix_release_knows_says_so(tmp_path):
    repo = tmp_path / "repo"
    ensemble = repo / "pipe"
    (ensemble / "1").mkdir(parents=True)
    (ensemble / "config.pbtxt").write_text(
        'name: "pipe"\nplatform: "ensemble"\nensemble_scheduling {\n  max_inflight_requests: 4\n  step [ ]\n}\n'
    )
    [error] = errors(validate_repository(repo, None, newest_release()))
    assert error.startswith(f"{ensemble / 'config.pbtxt'}:4:3: error: max_inflight_requests is not a field of ")
    assert "ModelEnsembling in Triton 25.04 (tritonclient 2.57.0); it arrived later, in a release newer than" in error


@pytest.mark.parametrize("env", ENVS)
def test_each_environment_validates_the_examples_with_its_own_release(env, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(PULUMI_DIR))
    from gpu_serving.fleet import load_fleet  # the stack's own reader of the fleet facts

    stack = yaml.safe_load((PULUMI_DIR / f"Pulumi.{env}.yaml").read_text())["config"]
    fleet = load_fleet((PULUMI_DIR / stack["gpu-serving:fleetInventory"]).resolve())
    release = release_for_env(PULUMI_DIR, env)
    assert release == stack["gpu-serving:triton"].get("release", fleet.triton_release)
    assert main([str(ROOT / "model_repository"), "--env", env, "--strict"]) == 0
    summary = capsys.readouterr().out.splitlines()[-1]
    assert f"schema of Triton {release} (tritonclient {matrix_releases()[release]})" in summary
    assert summary.endswith(": ok")


def test_env_release_decides_and_triton_release_overrides(tmp_path, capsys):
    repo = trt_repository(tmp_path / "repo", "    is_non_linear_format_io: true\n")
    pulumi_dir = tmp_path / "pulumi"
    fleet = tmp_path / "inventories/prod/group_vars/gpu_nodes"
    fleet.mkdir(parents=True)
    (fleet / "fleet.yml").write_text('gpu_fleet_triton_release: "24.05"\n')
    pulumi_dir.mkdir()
    (pulumi_dir / "Pulumi.prod.yaml").write_text(
        "config:\n  gpu-serving:fleetInventory: ../inventories/prod\n  gpu-serving:triton:\n    gpus: 1\n"
    )
    assert main([str(repo), "--env", "prod", "--pulumi-dir", str(pulumi_dir)]) == 1
    assert "in Triton 24.05 (tritonclient 2.46.0)" in capsys.readouterr().out
    assert main([str(repo), "--env", "prod", "--pulumi-dir", str(pulumi_dir), "--triton-release", "24.10"]) == 0
    assert "schema of Triton 24.10 (tritonclient 2.51.0)" in capsys.readouterr().out
    # The stack's own pin wins over the fleet's release, as in pulumi/gpu_serving/config.py.
    (pulumi_dir / "Pulumi.prod.yaml").write_text(
        "config:\n  gpu-serving:fleetInventory: ../inventories/prod\n"
        '  gpu-serving:triton:\n    gpus: 1\n    release: "24.10"\n'
    )
    assert release_for_env(pulumi_dir, "prod") == "24.10"
    assert main([str(repo), "--format", "json"]) == 0
    assert '"triton_release": "25.04"' in capsys.readouterr().out


@pytest.mark.parametrize(
    ("body", "fleet", "reason"),
    [
        ("config:\n  gpu-serving:triton:\n    gpus: 1\n", None, "no Triton release: neither"),
        ("config:\n  gpu-serving:triton:\n    gpus: 1\n    release: 24.05\n", None, "must be a release tag string"),
        ("config:\n  gpu-serving:fleetInventory: ../inv\n  gpu-serving:triton: {gpus: 1}\n", None, "cannot read"),
        (
            "config:\n  gpu-serving:fleetInventory: ../inv\n  gpu-serving:triton: {gpus: 1}\n",
            "x: 1\n",
            "fleet.yml: gpu",
        ),
        ('config:\n  gpu-serving:triton:\n    gpus: 1\n    release: "22.01"\n', None, "'22.01' is not in platform"),
    ],
)
def test_an_unknown_release_is_a_usage_error_naming_the_file(tmp_path, capsys, body, fleet, reason):
    pulumi_dir = tmp_path / "pulumi"
    pulumi_dir.mkdir()
    (pulumi_dir / "Pulumi.staging.yaml").write_text(body)
    if fleet is not None:
        (tmp_path / "inv/group_vars/gpu_nodes").mkdir(parents=True)
        (tmp_path / "inv/group_vars/gpu_nodes/fleet.yml").write_text(fleet)
    assert main([str(ROOT / "model_repository"), "--env", "staging", "--pulumi-dir", str(pulumi_dir)]) == 2
    assert reason in capsys.readouterr().err


def test_unknown_release_flag_and_triton_engine_are_refused(capsys):
    with pytest.raises(SystemExit) as raised:
        main(["--triton-release", "22.01"])
    assert raised.value.code == 2
    assert "invalid choice: '22.01'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--engine", "triton", "--triton-release", "24.10"])
    assert "--triton-release set the target of the rules engine" in capsys.readouterr().err
    with pytest.raises(ReleaseSchemaError, match=r"not in platform_matrix/matrix\.yml"):
        load_schema("22.01")
    with pytest.raises(TargetEnvError, match="not found"):
        release_for_env(ROOT / "pulumi", "nowhere")


@pytest.mark.parametrize("release", list(matrix_releases()))
def test_examples_and_quickstart_are_clean_under_every_release(tmp_path, release):
    for repository in (ROOT / "model_repository", build(tmp_path / "quickstart")):
        report = validate_repository(repository, None, release)
        assert report.release == release
        assert [str(f) for f in report.findings] == []
