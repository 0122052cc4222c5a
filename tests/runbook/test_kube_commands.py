"""The runbook's Kubernetes commands against recorded API objects (fixtures/) served by the API
stand-in (kube_api.py): the exact requests each command sends, compared with what
kubectl-argo-rollouts sends (its patch constants, copied below from argoproj/argo-rollouts
pkg/kubectl-argo-rollouts/cmd/{promote,abort,pause}/*.go at 9f8d111d), and the errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from model_repo_check.tritonserver.processes import free_port
from serving.runbook.cli import main
from tests.runbook.kube_api import MERGE_PATCH, TOKEN, fixture

REPO = Path(__file__).resolve().parents[2]
ROLLOUT = "/apis/argoproj.io/v1alpha1/namespaces/triton/rollouts/triton"

# The plugin's patches, verbatim (Go format strings where it has them).
ABORT_PATCH = '{"status":{"abort":true}}'
PAUSE_PATCH = '{"spec":{"paused":true}}'
UNPAUSE_PATCH = '{"spec":{"paused":false}}'
PROMOTE_FULL_PATCH = '{"status":{"promoteFull":true}}'
CLEAR_PAUSE_CONDITIONS_PATCH_WITH_STEP = '{"status":{"pauseConditions":null, "currentStepIndex":%d}}'
CLEAR_PAUSE_CONDITIONS_AND_CONTROLLER_PAUSE_PATCH = (
    '{"status":{"pauseConditions":null, "controllerPause":false, "currentStepIndex":%d}}'
)
UNPAUSE_AND_CLEAR_PAUSE_CONDITIONS_PATCH_WITH_STEP = (
    '{"spec":{"paused":false},"status":{"pauseConditions":null, "currentStepIndex":%d}}'
)


def patches(api) -> list[tuple[str, str | None, object]]:
    """(path, Content-Type, parsed body) of each write the stand-in received, in order."""
    return [(r.path, r.content_type, r.json()) for r in api.writes()]


def load(api, rollout: str, hpa: bool = False) -> None:
    api.rollouts["triton"] = fixture(rollout)
    if hpa:
        api.hpas["triton"] = fixture("hpa-triton.json")


def test_status_reports_phase_step_weights_and_hashes(kube_api, runbook):
    load(kube_api, "rollout-inconclusive-at-50.json", hpa=True)
    code, out, _ = runbook("status", "--only", "rollout")
    assert code == 0
    assert "phase:    Paused (InconclusiveAnalysisRun)" in out
    assert "step:     4/5: analysis (triton-canary-latency, triton-canary-errors, triton-canary-accuracy)" in out
    assert "weights:  stable 50%, canary 50%" in out
    assert "stable:   7c9b5d6f48" in out and "canary:   6d8f9c7b5" in out
    assert "hpa:      triton: min 2, max 16, current 4" in out
    assert kube_api.writes() == []
    assert all(r.authorization == f"Bearer {TOKEN}" for r in kube_api.requests)


def test_promote_during_analysis_moves_to_the_next_step(kube_api, runbook):
    load(kube_api, "rollout-analysis-at-5.json")
    code, out, _ = runbook("promote")
    assert (code, out.splitlines()[0]) == (0, "rollout 'triton' promoted")
    assert patches(kube_api) == [
        (f"{ROLLOUT}/status", MERGE_PATCH, json.loads(CLEAR_PAUSE_CONDITIONS_PATCH_WITH_STEP % 2))
    ]
    assert kube_api.rollouts["triton"]["status"]["currentStepIndex"] == 2


def test_promote_after_inconclusive_analysis_clears_the_controller_pause(kube_api, runbook):
    load(kube_api, "rollout-inconclusive-at-50.json")
    assert runbook("promote")[0] == 0
    assert patches(kube_api) == [
        (f"{ROLLOUT}/status", MERGE_PATCH, json.loads(CLEAR_PAUSE_CONDITIONS_AND_CONTROLLER_PAUSE_PATCH % 4))
    ]
    status = kube_api.rollouts["triton"]["status"]
    assert "pauseConditions" not in status and status["controllerPause"] is False


def test_promote_of_a_paused_rollout_patches_status_then_spec(kube_api, runbook):
    load(kube_api, "rollout-paused-by-user.json")
    assert runbook("promote")[0] == 0
    assert patches(kube_api) == [
        (f"{ROLLOUT}/status", MERGE_PATCH, json.loads(CLEAR_PAUSE_CONDITIONS_PATCH_WITH_STEP % 3)),
        (ROLLOUT, MERGE_PATCH, json.loads(UNPAUSE_PATCH)),
    ]
    assert kube_api.rollouts["triton"]["spec"]["paused"] is False


def test_promote_falls_back_to_one_patch_without_the_status_subresource(kube_api, runbook):
    load(kube_api, "rollout-analysis-at-5.json")
    kube_api.status_subresource = False
    assert runbook("promote")[0] == 0
    assert patches(kube_api) == [
        (f"{ROLLOUT}/status", MERGE_PATCH, json.loads(CLEAR_PAUSE_CONDITIONS_PATCH_WITH_STEP % 2)),
        (ROLLOUT, MERGE_PATCH, json.loads(UNPAUSE_AND_CLEAR_PAUSE_CONDITIONS_PATCH_WITH_STEP % 2)),
    ]


def test_promote_full_sets_promote_full(kube_api, runbook):
    load(kube_api, "rollout-analysis-at-5.json")
    code, out, _ = runbook("promote", "--full")
    assert (code, out.splitlines()[0]) == (0, "rollout 'triton' fully promoted")
    assert patches(kube_api) == [(f"{ROLLOUT}/status", MERGE_PATCH, json.loads(PROMOTE_FULL_PATCH))]


def test_promote_full_of_a_healthy_rollout_sends_nothing(kube_api, runbook):
    load(kube_api, "rollout-healthy.json")
    code, out, _ = runbook("promote", "--full")
    assert code == 0 and "nothing to promote" in out
    assert kube_api.writes() == []


def test_abort_sets_status_abort_through_the_status_subresource(kube_api, runbook):
    load(kube_api, "rollout-analysis-at-5.json")
    code, out, _ = runbook("abort")
    assert code == 0 and "aborted" in out
    assert patches(kube_api) == [(f"{ROLLOUT}/status", MERGE_PATCH, json.loads(ABORT_PATCH))]
    assert kube_api.rollouts["triton"]["status"]["abort"] is True
    assert "abort" not in kube_api.rollouts["triton"]["spec"]


def test_abort_without_the_status_subresource_patches_the_object(kube_api, runbook):
    load(kube_api, "rollout-analysis-at-5.json")
    kube_api.status_subresource = False
    assert runbook("abort")[0] == 0
    assert patches(kube_api) == [
        (f"{ROLLOUT}/status", MERGE_PATCH, json.loads(ABORT_PATCH)),
        (ROLLOUT, MERGE_PATCH, json.loads(ABORT_PATCH)),
    ]


def test_pause_sets_spec_paused(kube_api, runbook):
    load(kube_api, "rollout-analysis-at-5.json")
    code, out, _ = runbook("pause")
    assert (code, out.splitlines()[0]) == (0, "rollout 'triton' paused")
    assert patches(kube_api) == [(ROLLOUT, MERGE_PATCH, json.loads(PAUSE_PATCH))]
    assert kube_api.rollouts["triton"]["spec"]["paused"] is True


@pytest.mark.parametrize(
    ("args", "undone_by"),
    [
        (["promote"], "`scripts/runbook abort` sends all traffic to stable"),
        (["pause"], "undone by `scripts/runbook promote`"),
        (["abort"], "undone by `kubectl argo rollouts retry rollout triton -n triton`"),
    ],
)
def test_a_live_action_says_so_and_what_undoes_it(kube_api, runbook, capsys, args, undone_by):
    load(kube_api, "rollout-paused-by-user.json")
    code, out, _ = runbook(*args)
    *_, last = out.splitlines()
    assert code == 0 and last.startswith("live action: ") and "Rollout triton/triton" in last
    assert undone_by in last
    assert runbook(*args, "--dry-run")[1].splitlines()[-1] == f"# {last}"
    with pytest.raises(SystemExit):
        main([*args, "--help"])
    assert "live action: " in capsys.readouterr().out


def test_abort_names_the_git_change_that_stays_on_stable(kube_api, runbook):
    load(kube_api, "rollout-analysis-at-5.json")
    out = runbook("abort")[1]
    assert "scripts/runbook desired model-rollback" in out and "desired triton-release" in out


def test_the_live_patches_of_desired_state_are_gone(capsys):
    """The HPA's bounds and the pod template are desired state (the stack file): a live patch of
    either would be put back by Argo CD's self-heal, so the runbook has none."""
    for command in ("scale", "rollback"):
        with pytest.raises(SystemExit) as exited:
            main([command])
        assert exited.value.code == 2 and f"invalid choice: '{command}'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("fixture_name", "args"),
    [
        ("rollout-paused-by-user.json", ["promote"]),
        ("rollout-analysis-at-5.json", ["promote", "--full"]),
        ("rollout-analysis-at-5.json", ["abort"]),
        ("rollout-analysis-at-5.json", ["pause"]),
    ],
)
def test_dry_run_prints_the_requests_and_sends_none(kube_api, runbook, fixture_name, args):
    load(kube_api, fixture_name, hpa=True)
    code, printed, _ = runbook(*args, "--dry-run")
    assert code == 0 and kube_api.writes() == []
    assert kube_api.rollouts["triton"] == fixture(fixture_name)
    assert kube_api.hpas["triton"] == fixture("hpa-triton.json")
    assert runbook(*args)[0] == 0
    sent = [
        f"PATCH {kube_api.url}{r.path}\nContent-Type: {r.content_type}\n\n{r.body.decode()}" for r in kube_api.writes()
    ]
    assert sent and all(request in printed for request in sent)


def test_a_missing_rollout_is_refused_naming_it(kube_api, runbook):
    code, _, err = runbook("promote", "--rollout", "triton-next")
    assert code == 1
    assert "GET Rollout triton-next in namespace triton: the API server answered 404 Not Found" in err
    assert 'rollouts.argoproj.io "triton-next" not found' in err
    code, _, err = runbook("abort", "--rollout", "triton-next")
    assert code == 1 and "PATCH Rollout triton-next in namespace triton" in err
    # as the plugin: the status subresource first, the object after its 404
    assert [r.path for r in kube_api.writes()] == [
        "/apis/argoproj.io/v1alpha1/namespaces/triton/rollouts/triton-next/status",
        "/apis/argoproj.io/v1alpha1/namespaces/triton/rollouts/triton-next",
    ]


def test_forbidden_is_refused_with_the_servers_message(kube_api, runbook):
    load(kube_api, "rollout-analysis-at-5.json")
    kube_api.forbidden.add(("PATCH", f"{ROLLOUT}/status"))
    code, _, err = runbook("abort")
    assert code == 1
    assert "PATCH Rollout triton (status subresource) in namespace triton" in err
    assert '{"status": {"abort": true}}' in err
    assert "403 Forbidden" in err and 'cannot patch resource "rollouts/status" in API group "argoproj.io"' in err
    assert len(kube_api.writes()) == 1  # a 403 is not the plugin's 404 fallback


def test_unreachable_api_server_exits_2(tmp_path, capsys):
    kubeconfig = tmp_path / "kubeconfig"
    server = f"http://127.0.0.1:{free_port()}"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "gone", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}],
                "current-context": "gone",
            }
        )
    )
    assert main(["pause", "--kubeconfig", str(kubeconfig)]) == 2
    err = capsys.readouterr().err
    assert (
        "PATCH Rollout triton in namespace triton" in err
        and f"cannot reach the Kubernetes API server at {server}" in err
    )


def test_no_kubeconfig_and_no_cluster_exits_2(tmp_path, capsys):
    assert main(["pause", "--kubeconfig", str(tmp_path / "missing")]) == 2
    assert "no usable Kubernetes configuration" in capsys.readouterr().err


def test_the_script_runs_as_a_program(kube_api, tmp_path):
    load(kube_api, "rollout-healthy.json")
    kubeconfig = kube_api.kubeconfig(tmp_path / "kubeconfig")
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts/runbook"), "status", "--only", "rollout", "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "phase:    Healthy" in result.stdout and "step:     all 5 steps done" in result.stdout
    bad = subprocess.run(
        [sys.executable, str(REPO / "scripts/runbook"), "desired", "scale"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2 and "the following arguments are required: --env" in bad.stderr
