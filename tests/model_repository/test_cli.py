"""scripts/validate_model_repo: text and JSON output, exit codes, --strict, the target environment."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from model_repo_check.cli import main
from model_repo_check.target_env import TargetEnvError, gpus_for_env

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts/validate_model_repo"


def stack(tmp_path: Path, env: str, body: str) -> Path:
    pulumi_dir = tmp_path / "pulumi"
    pulumi_dir.mkdir(exist_ok=True)
    (pulumi_dir / f"Pulumi.{env}.yaml").write_text(body)
    return pulumi_dir


def use_gpu(repo: Path) -> None:
    path = repo / "image-preprocess/config.pbtxt"
    path.write_text(path.read_text().replace("kind: KIND_CPU", "kind: KIND_GPU"))


def test_script_reports_parse_error_as_path_line_col(repo):
    path = repo / "text-classifier/config.pbtxt"
    text = path.read_text()
    path.write_text(text.replace("data_type: TYPE_FP32\n    dims: [32]", "data_type: type_fp32\n    dims: [32]"))
    run = subprocess.run([sys.executable, str(SCRIPT), str(repo)], capture_output=True, text=True, check=False)
    assert run.returncode == 1
    first = run.stdout.splitlines()[0]
    assert first.startswith(f"{path}:10:16: error: Enum type")
    assert first.endswith("[parse]")
    assert run.stdout.splitlines()[-1].endswith(
        "1 error(s), 0 warning(s), schema of Triton 25.04 (tritonclient 2.57.0), target GPUs per pod: any: FAILED"
    )


def test_script_on_the_examples_exits_zero():
    run = subprocess.run([sys.executable, str(SCRIPT), "--strict"], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 model(s), 0 error(s), 0 warning(s)" in run.stdout


def test_json_output(repo, capsys):
    use_gpu(repo)
    assert main([str(repo), "--gpus", "0", "--format", "json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] is False
    assert document["target_gpus"] == 0
    assert document["models"] == ["image-preprocess", "text-classifier"]
    assert (document["errors"], document["warnings"]) == (1, 0)
    [finding] = document["findings"]
    assert finding["code"] == "gpu-unavailable"
    assert finding["severity"] == "error"
    assert finding["location"] == {"path": str(repo / "image-preprocess/config.pbtxt"), "line": 23, "column": 5}
    assert finding["where"] == f"{repo}/image-preprocess/config.pbtxt:23:5"


def test_warnings_fail_only_with_strict(repo, capsys):
    (repo / "image-preprocess").rename(repo / "image+preprocess")
    path = repo / "image+preprocess/config.pbtxt"
    path.write_text(path.read_text().replace('name: "image-preprocess"', 'name: "image+preprocess"'))
    assert main([str(repo)]) == 0
    assert "warning: model name 'image+preprocess' has characters a URL must percent-encode" in capsys.readouterr().out
    assert main([str(repo), "--strict"]) == 1
    assert capsys.readouterr().out.splitlines()[-1].endswith(": FAILED")


def test_env_without_gpus_rejects_kind_gpu(repo, tmp_path, capsys):
    use_gpu(repo)
    pulumi_dir = stack(tmp_path, "lab", 'config:\n  gpu-serving:triton:\n    gpus: 0\n    release: "23.09"\n')
    assert main([str(repo), "--env", "lab", "--pulumi-dir", str(pulumi_dir)]) == 1
    assert "KIND_GPU but the target environment schedules no GPUs" in capsys.readouterr().out


def test_env_with_gpus_accepts_kind_gpu(repo, tmp_path):
    use_gpu(repo)
    pulumi_dir = stack(
        tmp_path,
        "prod",
        'config:\n  gpu-serving:region: eu\n  gpu-serving:triton:\n    gpus: 2\n    release: "24.05"\n',
    )
    assert gpus_for_env(pulumi_dir, "prod") == 2
    assert main([str(repo), "--env", "prod", "--pulumi-dir", str(pulumi_dir)]) == 0


def test_gpus_flag_and_default(repo):
    use_gpu(repo)
    assert main([str(repo)]) == 0  # neither --env nor --gpus: GPUs are assumed available
    assert main([str(repo), "--gpus", "1"]) == 0
    assert main([str(repo), "--gpus", "0"]) == 1


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (None, "stack file of environment 'staging' not found (it holds config key gpu-serving:triton)"),
        ("config:\n  gpu-serving:replicas: 2\n", "config key 'gpu-serving:triton' is missing"),
        ("encryptionsalt: x\n", "config key 'gpu-serving:triton' is missing"),
        ("config:\n  gpu-serving:triton: 1\n", "'gpu-serving:triton' must be a mapping with an integer 'gpus'"),
        ("config:\n  gpu-serving:triton:\n    gpus: two\n", "'gpu-serving:triton.gpus' must be an integer >= 0"),
        ("config:\n  gpu-serving:triton:\n    gpus: -1\n", "must be an integer >= 0, got -1"),
        ("config:\n  gpu-serving:triton:\n    gpus: true\n", "must be an integer >= 0, got True"),
        ("config: [\n", "not valid YAML"),
    ],
)
def test_bad_stack_file_names_file_and_key(tmp_path, capsys, body, reason):
    pulumi_dir = tmp_path / "pulumi"
    pulumi_dir.mkdir()
    if body is not None:
        stack(tmp_path, "staging", body)
    with pytest.raises(TargetEnvError, match=r"Pulumi\.staging\.yaml") as raised:
        gpus_for_env(pulumi_dir, "staging")
    assert reason in str(raised.value)
    assert main(["--env", "staging", "--pulumi-dir", str(pulumi_dir)]) == 2
    err = capsys.readouterr().err
    assert f"{pulumi_dir / 'Pulumi.staging.yaml'}: " in err
    assert reason in err


def test_env_and_gpus_are_exclusive(capsys):
    with pytest.raises(SystemExit) as raised:
        main(["--env", "prod", "--gpus", "1"])
    assert raised.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_missing_repository(tmp_path, capsys):
    assert main([str(tmp_path / "nowhere")]) == 1
    assert "model repository folder not found [no-repository]" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ([], {}, "scripts/validate_model_repo model_repository"),
        (["ENV=staging"], {}, "scripts/validate_model_repo model_repository --env staging"),
        ([], {"ENV": "lab"}, "scripts/validate_model_repo model_repository --env lab"),
    ],
)
def test_make_validate_models_passes_env_only_when_given(args, env, expected):
    """The Makefile's own `ENV ?= prod` must not turn on the GPU rule of prod by itself."""
    environ = {k: v for k, v in os.environ.items() if k not in ("ENV", "MAKEFLAGS", "MFLAGS")} | env
    run = subprocess.run(
        ["make", "-n", "--no-print-directory", "validate-models", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        check=True,
    )
    [command] = [line for line in run.stdout.splitlines() if "validate_model_repo" in line]
    assert command.split("python ", 1)[1].strip() == expected


def test_triton_engine_without_its_venv_names_the_make_target(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("model_repo_check.tritonserver.server.TRITON_VENV", tmp_path / "no-venv")
    assert main(["--engine", "triton"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("validate_model_repo: error: ")
    assert "run `make .venv-triton/.stamp`" in err


@pytest.mark.parametrize("target", [["--gpus", "1"], ["--env", "prod"]])
def test_triton_engine_takes_no_target_environment(target, capsys):
    with pytest.raises(SystemExit) as raised:
        main(["--engine", "triton", *target])
    assert raised.value.code == 2
    assert "--engine triton uses this machine" in capsys.readouterr().err
