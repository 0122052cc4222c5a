"""docs/own-cluster.md, walked: every command of its `sh` blocks runs, in order, in a scratch copy of
this repository (a git repository with a bare `origin` on disk), so the page cannot drift from the
code. Commands that need what this machine lacks run in a mode that needs none of it, each named in
RULES below:

- `ansible-playbook` against the new fleet: no host answers here, so `--syntax-check` and
  `--list-hosts` (the playbook and the filled inventory parse, the hosts are the ones filled in);
- `make compliance`: the target's command with pytest's `--collect-only` (testinfra reads the
  inventory with ansible-inventory, and connects only when a test runs);
- `pulumi ...`: no Pulumi CLI, so `config set --secret` gives the program its secrets and
  `preview`/`up` run pulumi/__main__.py of the copy under Pulumi's mocks, with a kubeconfig that
  has the filled context (tests/pulumi/pulumi_mocks.py), which registers every resource through
  the stack's one provider; the policy pack is not run on this path (tests/pulumi runs it);
- the model store: moto's S3 server on loopback, holding the bucket the filled stack names.

Between the commands the test does what the page tells a person to do (fill the placeholders) and
checks what the page promises: render refused while a placeholder remains, the published release
referenced by the rendered Rollout and loaded from s3:// by the lab's tritonserver (the Rollout's
own --model-repository, pointed at the loopback store), and the rollback back to no release
re-rendered. Last, the serving lab runs the new environment's rendered rules and Alertmanager
config: the Watchdog heartbeat and, once tritonserver stops, the page reach its receivers."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pytest
import yaml

from lab_fleet import deployed
from lab_fleet.serving import SCRAPE_INTERVAL_S, ServingLab
from model_repo_check.tritonserver.processes import (
    LOOPBACK,
    wait_for,
)
from model_repo_check.tritonserver.server import TritonProcess
from monitoring import spec
from serving.release.store import client
from tests.pulumi.test_new_environment import FILLED, fill, listed
from tests.release.moto import CREDENTIALS, moto_s3
from tests.serving_lab.alerting import (
    WebhookReceiver,
    alerting_rules,
    check_shortened,
    lab_for,
    rule_index,
    seconds,
    shorten_fors,
    triton_down_rule,
)

pytestmark = pytest.mark.serving_lab

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs/own-cluster.md"
ENV = "edge"
# The environments linked into the copy, as `make` would link them from the cache.
VENVS = (".venv", ".venv-s3", ".venv-triton")
MARKER = re.compile(r'"<fill: [^"]*>"')


def commands(page: str) -> Iterator[str]:
    """Each command line of the page's ```sh blocks, comments and continuation joined."""
    for block in re.findall(r"^```sh\n(.*?)^```", page, re.MULTILINE | re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                yield line


@dataclass
class Walk:
    root: Path
    endpoint: str
    cwd: Path = field(init=False)
    secrets: dict[str, str] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cwd = self.root

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            **CREDENTIALS,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "GIT_AUTHOR_NAME": "walk",
            "GIT_AUTHOR_EMAIL": "walk@example.test",
            "GIT_COMMITTER_NAME": "walk",
            "GIT_COMMITTER_EMAIL": "walk@example.test",
        }

    def run(self, argv: list[str], check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            argv, cwd=cwd or self.cwd, env=self.env(), capture_output=True, text=True, timeout=600, check=False
        )
        if check and proc.returncode != 0:
            pytest.fail(f"`{shlex.join(argv)}` exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc


def _cd(walk: Walk, argv: list[str]) -> None:
    walk.cwd = (walk.cwd / argv[1]).resolve()


def _as_is(walk: Walk, argv: list[str]) -> None:
    walk.run(argv)


def _new_environment(walk: Walk, argv: list[str]) -> None:
    out = walk.run(argv).stdout
    stack = walk.root / f"pulumi/Pulumi.{ENV}.yaml"
    assert MARKER.search(stack.read_text()), f"{stack} has no placeholder to fill:\n{out}"
    refused = walk.run(["make", "render", f"ENV={ENV}"], check=False)
    assert refused.returncode != 0, "render passed with placeholders left"
    assert re.search(rf"Pulumi\.{ENV}\.yaml: gpu-serving:\S+", refused.stdout + refused.stderr), refused
    assert not (walk.root / "deploy/serving" / ENV).exists(), "a refused render wrote deploy/serving/edge"
    assert set(FILLED) <= {key.removeprefix("gpu-serving:") for _, key in listed(out)}, out
    fill(walk.root)  # what the page asks of a person: every placeholder filled in


def _site(walk: Walk, argv: list[str]) -> None:
    base = [arg for arg in argv if arg not in ("--check", "--diff")]
    walk.run([*base, "--syntax-check"])
    hosts = walk.run([*base, "--list-hosts"]).stdout
    assert all(host in hosts for host in ("gpu-e01.corp.test", "gpu-e02.corp.test")), hosts


def _compliance(walk: Walk, argv: list[str]) -> None:
    """The target's own command (`make -n`), with pytest collecting only: the run reports no
    checks, so it exits 2 saying that pytest itself passed."""
    made = walk.run(["make", "-n", *argv[1:]]).stdout.splitlines()
    (command,) = [line for line in made if "tests.compliance.run" in line]
    collected = walk.run(["sh", "-c", f"{command} -- --collect-only -q"], check=False)
    assert "tests/compliance/test_driver.py: " in collected.stdout, collected
    assert "(pytest exit 0)" in collected.stderr, collected


def _pulumi(walk: Walk, argv: list[str]) -> None:
    verb = argv[1:3]
    if verb == ["stack", "init"]:
        return  # the stack's config is its stack file; no backend here
    if verb == ["config", "set"]:
        key, *value = [arg for arg in argv[3:] if not arg.startswith("-") and arg != ENV]
        # Without a value Pulumi prompts for it; URL stands for a receiver's webhook.
        prompted = f"http://{LOOPBACK}:9/{key}" if key.startswith("alertReceiver") else "prompted-s3cret"
        walk.secrets[key] = value[0] if value not in ([], ["URL"]) else prompted
        return
    assert verb[0] in ("preview", "up"), f"no rule for `{shlex.join(argv)}`"
    assert {"grafanaAdminPassword", "alertReceiverPage", "alertReceiverTicket", "alertReceiverHeartbeat"} <= set(
        walk.secrets
    ), walk.secrets
    kubeconfig = walk.root / "walk-kubeconfig.yaml"
    context, cluster = FILLED["kubernetes.context"], FILLED["kubernetes.cluster"]
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": cluster, "cluster": {"server": f"https://{LOOPBACK}:6443"}}],
                "users": [{"name": "admin", "user": {"token": "t"}}],
                "contexts": [{"name": context, "context": {"cluster": cluster, "user": "admin"}}],
                "current-context": context,
            }
        )
    )
    receivers = {
        key.removeprefix("alertReceiver").lower(): url for key, url in walk.secrets.items() if "Receiver" in key
    }
    program = (
        "from pathlib import Path\n"
        "from tests.pulumi.pulumi_mocks import run_program\n"
        f"mocks = run_program({ENV!r}, password={walk.secrets['grafanaAdminPassword']!r}, receivers={receivers!r},"
        f" kubeconfig=Path({str(kubeconfig)!r}))\n"
        "(provider,) = mocks.of_type('pulumi:providers:kubernetes')\n"
        "kube = [r for r in mocks.resources if r.typ.startswith('kubernetes:')]\n"
        "print(provider.inputs.get('context'), len(kube), {r.provider.rsplit('::', 1)[-1] for r in kube})\n"
    )
    path = f"{walk.root}:{walk.root / 'pulumi'}"
    out = walk.run(["sh", "-c", f"PYTHONPATH={path} {shlex.quote(sys.executable)} -c {shlex.quote(program)}"]).stdout
    assert re.fullmatch(rf"{re.escape(context)} [1-9][0-9]* {{'cluster-id'}}\n", out), out


def _git_push(walk: Walk, argv: list[str]) -> None:
    walk.run(argv)
    local = walk.run(["git", "rev-parse", "HEAD"]).stdout
    remote = walk.run(["git", "rev-parse", "HEAD"], cwd=walk.root.parent / "origin.git").stdout
    assert local == remote


RULES: list[tuple[re.Pattern[str], Callable[[Walk, list[str]], None]]] = [
    (re.compile(r"^cd "), _cd),
    (re.compile(r"^make new-environment "), _new_environment),
    (re.compile(r"^make (venv|render|render-addons|docs)\b"), _as_is),
    (re.compile(r"^\.venv/bin/ansible-playbook .*playbooks/site\.yml"), _site),
    (re.compile(r"^make compliance "), _compliance),
    (re.compile(r"^pulumi "), _pulumi),
    (re.compile(r"^git push$"), _git_push),
    (re.compile(r"^git (add|commit) "), _as_is),
    (re.compile(r"^\.venv/bin/python scripts/(validate_model_repo|release_model|runbook) "), _as_is),
]


def _copy(target: Path) -> None:
    """The working tree as git sees it (tracked and untracked, not ignored), a commit on `main`,
    pushed to a bare `origin`; the environments linked in."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    for venv in VENVS:
        (target / venv).symlink_to((ROOT / venv).resolve())
    origin = target.parent / "origin.git"
    for argv in (
        ["git", "init", "-q", "--bare", "-b", "main", str(origin)],
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=walk", "-c", "user.email=walk@example.test", "commit", "-q", "-m", "clone"],
        ["git", "remote", "add", "origin", str(origin)],
        ["git", "push", "-q", "-u", "origin", "main"],
    ):
        subprocess.run(argv, cwd=target, check=True, capture_output=True)


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[str]:
    """moto's S3 server on a loopback port, with the bucket the filled stack names."""
    with moto_s3(tmp_path) as endpoint, mock.patch.dict(os.environ, CREDENTIALS):
        bucket = FILLED["triton.modelRepository"].removeprefix("s3://").split("/", 1)[0]
        client(endpoint).make_bucket(bucket)
        yield endpoint


def triton_repository(root: Path) -> str:
    """The --model-repository of the Triton container of the rendered Rollout."""
    (path,) = (root / "deploy/serving" / ENV / "manifests").glob("*-rollout-triton.yaml")
    rollout = next(doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc)
    (triton,) = [c for c in rollout["spec"]["template"]["spec"]["containers"] if c["name"] == "triton"]
    (arg,) = [arg for arg in triton["args"] if arg.startswith("--model-repository=")]
    return arg.split("=", 1)[1]


def serve_the_rendered_release(walk: Walk, run_dir: Path) -> None:
    """The lab's tritonserver, given the rendered Rollout's --model-repository with the loopback
    store's endpoint (Triton's form for an S3 endpoint of one's own), loads every model of the
    release straight from s3://, as the pod's Triton does with TRITON_AWS_MOUNT_DIRECTORY."""
    uri = triton_repository(walk.root)
    assert uri.startswith("s3://") and "/sha256-" in uri, uri
    mount = run_dir / "models"
    mount.mkdir(parents=True)
    environment = {
        key: value for key, value in walk.env().items() if key.startswith("AWS_") and key != "AWS_ENDPOINT_URL_S3"
    }
    with (
        mock.patch.dict(os.environ, {**environment, "TRITON_AWS_MOUNT_DIRECTORY": str(mount)}),
        TritonProcess(f"s3://{walk.endpoint}/{uri.removeprefix('s3://')}", run_dir / "triton") as triton,
    ):
        request = urllib.request.Request(f"{triton.http_url}/v2/repository/index", data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            index = json.load(response)
    ready = {(entry["name"], entry["version"]) for entry in index if entry.get("state") == "READY"}
    released = {
        (version.parent.name, version.name)
        for version in (walk.root / "model_repository").glob("*/[0-9]*")
        if version.is_dir()
    }
    assert released and ready == released, index


def alerts_reach_the_environments_receivers(root: Path, run_dir: Path) -> None:
    """The serving lab loads the new environment's rendered PrometheusRule and Alertmanager config
    (lab_fleet/deployed.py, each receiver's URL a local webhook in place of the Secret's file):
    Watchdog reaches the heartbeat receiver alone, and stopping tritonserver pages. TritonDown's
    `for` is shortened by the serving lab's checked rule (tests/serving_lab/alerting.py)."""
    deploy = root / "deploy/serving"
    project = deployed.rules_text(ENV, deploy)
    down = rule_index(project, triton_down_rule(project))
    shortened = lab_for(SCRAPE_INTERVAL_S)
    run_dir.mkdir(parents=True)
    rules = run_dir / "rules.yml"
    rules.write_text(shorten_fors(project, [down], shortened), encoding="utf-8")
    check_shortened(project, rules.read_text(encoding="utf-8"), [down], shortened, SCRAPE_INTERVAL_S)
    rule = alerting_rules(rules)[down]
    assert rule["labels"]["severity"] == "page", rule
    config, _ = deployed.alertmanager(ENV, deploy)
    group_wait = seconds(config["route"].get("group_wait", "30s"))
    with WebhookReceiver() as webhook:
        _, config_file = deployed.write(run_dir / "deployed", f"{webhook.url}/{ENV}", ENV, deploy)
        lab = ServingLab(run_dir / "run", rules=rules, alertmanager_config=config_file)
        try:
            lab.up()
            wait_for(
                lambda: webhook.receivers_of(f"/{ENV}", alertname=spec.HEARTBEAT_ALERT) == {"heartbeat"},
                group_wait + 60,
                "Watchdog at the heartbeat receiver of the new environment",
            )
            lab.triton.stop()
            wait_for(
                lambda: webhook.receivers_of(f"/{ENV}", alertname=rule["alert"]) == {"page"},
                seconds(rule["for"]) + 2 * SCRAPE_INTERVAL_S + group_wait + 30,
                f"{rule['alert']} at the page receiver of the new environment",
            )
        finally:
            lab.down()


def rollout_release(root: Path) -> str | None:
    (path,) = (root / "deploy/serving" / ENV / "manifests").glob("*-rollout-triton.yaml")
    rollout = next(doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc)
    annotations = rollout["spec"]["template"]["metadata"].get("annotations") or {}
    return annotations.get("gpu-serving.example.com/model-release")


def test_every_command_of_the_page_runs_in_order_on_a_scratch_clone(tmp_path: Path, s3: str) -> None:
    root = tmp_path / "clone"
    root.mkdir()
    _copy(root)
    walk = Walk(root, s3)
    published: str | None = None
    for line in commands(PAGE.read_text(encoding="utf-8")):
        rule = next((handler for pattern, handler in RULES if pattern.search(line)), None)
        assert rule is not None, f"docs/own-cluster.md: no rule runs `{line}`: add one to RULES"
        rule(walk, shlex.split(line))
        walk.ran.append(line)
        if line.startswith(".venv/bin/python scripts/release_model publish"):
            stack = yaml.safe_load((root / f"pulumi/Pulumi.{ENV}.yaml").read_text(encoding="utf-8"))["config"]
            published = stack["gpu-serving:modelRelease"]["digest"]
        if line == f"make render ENV={ENV}":
            assert rollout_release(root) == published, "the rendered Rollout does not run the stack's release"
            if published:
                serve_the_rendered_release(walk, tmp_path / "lab")
    assert published, "the page publishes no release"
    assert (tmp_path / "lab/triton/tritonserver.log").exists(), "no render after the publish: no Triton served it"
    assert walk.ran[-1] == "git push"
    # The page's last block rolled the first release back: to no release, rendered and pushed.
    assert "gpu-serving:modelRelease" not in (root / f"pulumi/Pulumi.{ENV}.yaml").read_text(encoding="utf-8")
    assert rollout_release(root) is None
    assert walk.run(["git", "status", "--porcelain", "--", "pulumi", "deploy"]).stdout == ""
    # Following the page leaves the repository's own checks green for the new environment too.
    walk.run(["make", "check-ownership"])
    walk.run([".venv/bin/pytest", "-q", "-p", "no:cacheprovider", "tests/pulumi/test_versions.py"])
    alerts_reach_the_environments_receivers(root, tmp_path / "alerting")
