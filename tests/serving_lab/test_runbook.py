"""`scripts/runbook model load|unload|reload` and `status --only triton` against the real
tritonserver: this module starts its own (explicit model control, so the repository API may load
and unload; the shared session lab loads everything at start) on a copy of the example model, and
stops it at the end. Readiness is read from Triton directly, not through the runbook."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from model_repo_check.tritonserver.server import REPO, TritonProcess

pytestmark = pytest.mark.serving_lab

MODEL = "text-classifier"
NEXT = "text-classifier-next"  # the same model under a second name, for the reload case


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonProcess]:
    repository = tmp_path_factory.mktemp("models")
    shutil.copytree(REPO / "model_repository" / MODEL, repository / MODEL)
    shutil.copytree(REPO / "model_repository" / MODEL, repository / NEXT)
    config = repository / NEXT / "config.pbtxt"
    config.write_text(config.read_text().replace(f'name: "{MODEL}"', f'name: "{NEXT}"'))
    process = TritonProcess(repository, tmp_path_factory.mktemp("triton"), ["--model-control-mode=explicit"])
    try:
        process.start()
        yield process
    finally:
        process.stop()


def _http(method: str, url: str, body: object = None) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            raw, status = response.read(), response.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    return status, json.loads(raw) if raw else None


def ready(triton: TritonProcess, name: str, version: str | None = None) -> bool:
    path = f"/v2/models/{name}" + (f"/versions/{version}" if version else "") + "/ready"
    return _http("GET", triton.http_url + path)[0] == 200


def states(triton: TritonProcess, name: str) -> dict[str, str]:
    """version -> state, as Triton's repository index has it."""
    index = _http("POST", f"{triton.http_url}/v2/repository/index", {})[1]
    return {e["version"]: e.get("state", "") for e in index if e["name"] == name and "version" in e}


def put(triton: TritonProcess, name: str, loaded: bool) -> None:
    """Bring a model to a state through Triton's API directly (not the runbook)."""
    verb = "load" if loaded else "unload"
    assert _http("POST", f"{triton.http_url}/v2/repository/models/{name}/{verb}", {})[0] == 200
    settled = {"READY", "UNAVAILABLE"} if loaded else {"UNAVAILABLE"}
    deadline = time.monotonic() + 60
    while (ready(triton, name), set(states(triton, name).values()) <= settled) != (loaded, True):
        assert time.monotonic() < deadline, f"{name}: {states(triton, name)}"
        time.sleep(0.2)


def runbook(triton: TritonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "scripts/runbook"), *args, "--triton-url", triton.http_url, "--timeout", "60"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_load_makes_the_model_ready(triton: TritonProcess) -> None:
    assert not ready(triton, MODEL)
    result = runbook(triton, "model", "load", MODEL, "--version", "2")
    assert result.returncode == 0, result.stderr
    assert ready(triton, MODEL) and ready(triton, MODEL, "1") and ready(triton, MODEL, "2")
    assert states(triton, MODEL) == {"1": "READY", "2": "READY"}
    assert f"loaded: {MODEL}: version 1 READY, version 2 READY" in result.stdout
    assert result.stdout.splitlines()[-1] == (
        f"live action: model {MODEL} loaded on the Triton at {triton.http_url} only (one pod); "
        f"undone by `scripts/runbook model unload {MODEL}`"
    )


def test_unload_makes_it_not_ready(triton: TritonProcess) -> None:
    put(triton, MODEL, loaded=True)
    result = runbook(triton, "model", "unload", MODEL)
    assert result.returncode == 0, result.stderr
    assert not ready(triton, MODEL)
    assert set(states(triton, MODEL).values()) == {"UNAVAILABLE"}
    assert "unloaded: " in result.stdout


def test_reload_picks_up_a_new_version(triton: TritonProcess) -> None:
    put(triton, NEXT, loaded=False)
    refused = runbook(triton, "model", "reload", NEXT)
    assert refused.returncode == 1 and f"model {NEXT} is not loaded" in refused.stderr
    put(triton, NEXT, loaded=True)
    assert not ready(triton, NEXT, "3")
    # a release: version 3 beside 2, version 1 retired by the version policy
    model_dir = triton.model_repository / NEXT
    shutil.copytree(model_dir / "2", model_dir / "3")
    config = model_dir / "config.pbtxt"
    config.write_text(config.read_text().replace("versions: [1, 2]", "versions: [2, 3]"))
    result = runbook(triton, "model", "reload", NEXT, "--version", "3")
    assert result.returncode == 0, result.stderr
    assert ready(triton, NEXT, "3") and ready(triton, NEXT, "2") and not ready(triton, NEXT, "1")
    assert states(triton, NEXT)["3"] == "READY" and states(triton, NEXT)["1"] == "UNAVAILABLE"


def test_a_version_the_policy_does_not_load_fails_the_readiness_check(triton: TritonProcess) -> None:
    put(triton, MODEL, loaded=False)
    result = runbook(triton, "model", "load", MODEL, "--version", "7")
    assert result.returncode == 1
    assert "version 7 of model text-classifier is not ready after load" in result.stderr
    assert "version_policy" in result.stderr


def test_a_missing_model_fails_with_tritons_message(triton: TritonProcess) -> None:
    status, answer = _http("POST", f"{triton.http_url}/v2/repository/models/no-such-model/load", {})
    assert status >= 400 and "no-such-model" in answer["error"]
    result = runbook(triton, "model", "load", "no-such-model")
    assert result.returncode == 1
    assert f"Triton answered {status}: {answer['error']}" in result.stderr
    assert "/v2/repository/models/no-such-model/load" in result.stderr


def test_dry_run_changes_nothing(triton: TritonProcess) -> None:
    put(triton, MODEL, loaded=False)
    before = states(triton, MODEL)
    result = runbook(triton, "model", "load", MODEL, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert f"POST {triton.http_url}/v2/repository/models/{MODEL}/load\nContent-Type: application/json\n\n{{}}" in (
        result.stdout
    )
    assert not ready(triton, MODEL) and states(triton, MODEL) == before
    put(triton, MODEL, loaded=True)
    result = runbook(triton, "model", "unload", MODEL, "--dry-run")
    assert result.returncode == 0 and f"/v2/repository/models/{MODEL}/unload" in result.stdout
    assert ready(triton, MODEL)


def test_status_lists_the_models_as_triton_reports_them(triton: TritonProcess) -> None:
    put(triton, MODEL, loaded=True)
    put(triton, NEXT, loaded=False)
    result = runbook(triton, "status", "--only", "triton")
    assert result.returncode == 0, result.stderr
    assert f"Triton {triton.http_url}: ready" in result.stdout
    assert f"  {MODEL} version 1: READY" in result.stdout and f"  {MODEL} version 2: READY" in result.stdout
    assert f"  {NEXT} version" in result.stdout and "UNAVAILABLE" in result.stdout
