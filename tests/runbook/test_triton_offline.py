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
    assert out.splitlines()[-1] == (
        f"# live action: model text-classifier loaded again on the Triton at {url} only (one pod), from what its "
        "repository holds now; a restart of the pod loads the same, so there is nothing to undo"
    )


@pytest.mark.parametrize(
    ("action", "undone_by"),
    [
        ("load", "undone by `scripts/runbook model unload text-classifier`"),
        ("unload", "undone by `scripts/runbook model load text-classifier`, or by the pod's restart"),
    ],
)
def test_a_model_action_says_it_is_live_and_what_undoes_it(capsys, action, undone_by):
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["model", action, "text-classifier", "--dry-run", "--triton-url", url]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith(f"# live action: model text-classifier {action}ed on the Triton at {url} only")
    assert undone_by in last
    with pytest.raises(SystemExit):
        main(["model", "--help"])
    assert "live action: model NAME unloaded" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model", "unload", "m", "--version", "1"], "Triton unloads every version of a model"),
        (["desired", "scale", "--env", "prod"], "give --min, --max or both"),
        (["desired", "model-rollback", "--env", "prod", "--to", "sha256:12"], "'sha256:12' is not sha256:<64 hex>"),
        (["promote", "--bogus"], "unrecognized arguments: --bogus"),
        (["model", "restart", "m"], "invalid choice: 'restart'"),
    ],
)
def test_bad_usage_exits_2(args, message, capsys):
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
