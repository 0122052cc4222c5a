"""The policy pack's rules, as plain functions, against the rendered manifests and the Pulumi
program's registrations: what ships breaks none of them."""

from pathlib import Path

import pytest
import yaml
from serving_rules import type_token, violations

from tests.pulumi.pulumi_mocks import run_program

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_rendered_manifests_break_no_policy(env):
    checked = set()
    for path in sorted((ROOT / "deploy" / "serving" / env).rglob("*.yaml")):
        obj = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert violations(type_token(obj), obj) == [], path
        checked.add(obj["kind"])
    assert {"Deployment", "Rollout", "AnalysisTemplate", "Service", "Application"} <= checked


def test_the_rules_do_catch_a_broken_rendered_deployment():
    (path,) = (ROOT / "deploy/serving/prod/manifests").glob("*-rollout-triton.yaml")
    obj = yaml.safe_load(path.read_text(encoding="utf-8"))
    pod = obj["spec"]["template"]["spec"]
    pod["tolerations"] = []
    pod["containers"][0]["image"] = "nvcr.io/nvidia/tritonserver:latest"
    assert {name for name, _ in violations(type_token(obj), obj)} == {
        "gpu-pods-are-placed-on-gpu-nodes",
        "images-are-pinned",
    }


def test_what_the_dev_program_registers_breaks_no_policy():
    mocks = run_program("dev")
    for resource in mocks.resources:
        assert violations(resource.typ, resource.inputs) == [], resource.name
        for obj in resource.inputs.get("objs") or []:  # the objects a ConfigGroup will create
            assert violations(type_token(obj), obj) == [], obj["metadata"]["name"]
