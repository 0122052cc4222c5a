"""Serving is protected by default: every environment's limiter config (rendered now by the real
add-ons playbook, and as committed under deploy/addons) protects every Triton pod that pulumi
renders (deploy/serving/<env>), by the serving stack's protect rule and, on its own, by the pod's
annotation. Judged by the agent's own code: its policy function, then the agent itself on a fake
node where Triton and a batch pod both write hard while Triton waits for the disk."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from cgroup_limiter.agent import Agent
from cgroup_limiter.config import NodeConfig, parse_config
from cgroup_limiter.pods import FilePodSource, PodInfo
from cgroup_limiter.policy import PROTECTED, pod_policy

from tests.k8s_addons.addon_render import REPO_ROOT, find, load_manifests, render
from tests.limiter.conftest import DISK, MB, FakeNode

ADDON_ENVS = sorted(
    {p.name for p in (REPO_ROOT / "inventories").iterdir() if p.is_dir()}
    | {p.name for p in (REPO_ROOT / "deploy/addons").iterdir() if p.is_dir()}
)
SERVING_ENVS = sorted(p.name for p in (REPO_ROOT / "deploy/serving").iterdir() if p.is_dir())
TRITON_UID = "9a000000-0000-4000-8000-000000000001"
BATCH_UID = "9a000000-0000-4000-8000-000000000002"


def limiter_config(manifests: dict[str, list[dict[str, Any]]], where: str) -> NodeConfig:
    text = find(manifests, "ConfigMap", "cgroup-limiter-config")["data"]["config.yaml"]
    return parse_config(yaml.safe_load(text), where)


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, NodeConfig]:
    """'<env>' rendered now from inventories/<env>, 'deploy/addons/<env>' as committed."""
    found = {}
    for env in ADDON_ENVS:
        if (REPO_ROOT / "inventories" / env).is_dir():
            out = tmp_path_factory.mktemp(f"limiter-{env}")
            result = render(env, out)
            assert result.returncode == 0, f"render of inventories/{env} failed:\n{result.stdout}\n{result.stderr}"
            found[env] = limiter_config(load_manifests(out), f"render of inventories/{env}")
        committed = REPO_ROOT / "deploy/addons" / env
        if committed.is_dir():
            found[f"deploy/addons/{env}"] = limiter_config(load_manifests(committed), str(committed))
    return found


def triton_pod(serving_env: str) -> PodInfo:
    """A pod of the Triton Rollout that pulumi rendered, as the API would show it on the node."""
    (path,) = (REPO_ROOT / "deploy/serving" / serving_env / "manifests").glob("*-rollout-triton.yaml")
    (rollout,) = [doc for doc in yaml.safe_load_all(path.read_text()) if doc and doc["kind"] == "Rollout"]
    template = rollout["spec"]["template"]["metadata"]
    labels = dict(template["labels"]) | {"rollouts-pod-template-hash": "6d4f9b7c8"}  # Argo Rollouts adds it
    return PodInfo(
        TRITON_UID, rollout["metadata"]["namespace"], "triton-6d4f9b7c8-x2x9q", labels, template["annotations"]
    )


def test_every_environment_is_checked():
    assert {"lab", "staging", "prod"} <= set(ADDON_ENVS)
    assert {"dev", "staging", "prod"} <= set(SERVING_ENVS)


@pytest.mark.parametrize("serving_env", SERVING_ENVS)
def test_no_environment_would_limit_a_triton_pod(configs, serving_env):
    triton = triton_pod(serving_env)
    assert triton.annotations.get(PROTECTED) == "true", "pulumi's Triton pod template lost its annotation"
    unannotated = dataclasses.replace(
        triton, annotations={k: v for k, v in triton.annotations.items() if k != PROTECTED}
    )
    assert set(configs) >= {f"deploy/addons/{env}" for env in ("lab", "staging", "prod")}
    for where, config in configs.items():
        assert config.adaptive.enabled, f"{where}: adaptive throttling is off: the check would prove nothing"
        assert pod_policy(triton, config).protected, f"{where} would limit Triton of {serving_env}"
        assert pod_policy(unannotated, config).protected, f"{where}: no protect rule covers Triton of {serving_env}"
        # The annotation alone protects too, whatever an environment's rules say.
        assert pod_policy(triton, dataclasses.replace(config, protect=())).protected
        # The control: without the rule and without the annotation this very pod would be limited.
        assert not pod_policy(unannotated, dataclasses.replace(config, protect=())).protected


@pytest.mark.parametrize("addon_env", ADDON_ENVS)
def test_the_agent_with_the_rendered_config_throttles_batch_never_triton(configs, addon_env, tmp_path: Path):
    config = configs.get(addon_env) or configs[f"deploy/addons/{addon_env}"]
    triton = triton_pod("prod")
    node = FakeNode(tmp_path)
    triton_path = node.add_pod(
        triton.name,
        TRITON_UID,
        dict(triton.labels),
        dict(triton.annotations),
        "guaranteed",
        "systemd",
        triton.namespace,
    )
    batch_path = node.add_pod("etl", BATCH_UID, {"app": "etl"}, {}, "besteffort", "systemd", "batch")
    fake_paths = {
        "sysfs_root": node.sysfs,
        "state_file": node.base / "state.json",
        "node_pressure_file": node.node_pressure,
    }
    source = FilePodSource(node.pods_file, "node-a")
    agent = Agent(dataclasses.replace(config, **fake_paths), source, node.root, clock=node.clock)
    agent.scan()
    for _ in range(config.adaptive.trigger_intervals + 1):
        node.add_bytes(triton_path, rbytes=900 * MB)  # loading a large model...
        node.set_pressure(80.0, triton_path)  # ...and waiting for the disk, which the batch pod fills
        node.add_bytes(batch_path, wbytes=900 * MB)
        node.tick(agent)
    for name, kubelet_value in (("io.max", ""), ("cpu.weight", "39\n"), ("cpu.max", "max 100000\n")):
        assert (triton_path / name).read_text() == kubelet_value, f"{addon_env}: Triton's {name} was written"
    ceiling = config.adaptive.ceiling_bps
    assert (batch_path / "io.max").read_text() == f"{DISK} rbps=max wbps={ceiling} riops=max wiops=max"
