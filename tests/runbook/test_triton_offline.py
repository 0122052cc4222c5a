"""The runbook's Triton commands where no Triton answers, and its usage errors (exit status 2);
the commands against the real tritonserver are in tests/serving_lab/test_runbook.py."""

from __future__ import annotations

import pytest

from model_repo_check.tritonserver.processes import free_port
from serving.runbook.cli import main


def test_unreachable_triton_exits_2(capsys):
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["model", "load", "text-classifier", "--triton-url", url]) == 2
    err = capsys.readouterr().err
    assert f"POST {url}/v2/repository/models/text-classifier/load: cannot reach Triton at {url}" in err
    assert main(["status", "--only", "triton", "--triton-url", url]) == 2
    assert f"Triton {url}: GET {url}/v2/health/ready: cannot reach Triton" in capsys.readouterr().err


def test_dry_run_of_a_model_action_needs_no_server(capsys):
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["model", "reload", "text-classifier", "--version", "3", "--dry-run", "--triton-url", url]) == 0
    out = capsys.readouterr().out
    assert f"POST {url}/v2/repository/models/text-classifier/load\nContent-Type: application/json\n\n{{}}" in out
    assert "until the model (and version 3) is ready" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model", "unload", "m", "--version", "1"], "Triton unloads every version of a model"),
        (["scale", "--replicas", "-1"], "--replicas must be >= 0"),
        (["promote", "--bogus"], "unrecognized arguments: --bogus"),
        (["model", "restart", "m"], "invalid choice: 'restart'"),
    ],
)
def test_bad_usage_exits_2(args, message, capsys):
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
