"""The stack file's checked text edit (serving/runbook/stack_edit.py) on small texts: the value
changes in place, every other line stays, and what a text edit cannot place is refused."""

from __future__ import annotations

import pytest
import yaml

from serving.runbook.stack_edit import StackEditError, set_value

STACK = """\
---
# Production.
config:
  gpu-serving:delivery: argocd
  gpu-serving:triton:
    namespace: triton  # the Rollout's
    replicas: {min: 2, max: 16}  # the HPA's bounds
    canary:
      steps:
        - setWeight: 5
  # The gateway.
  gpu-serving:gateway:
    replicas:
      min: 3  # floor
      # the ceiling
      max: 24
"""


def edit(keys: tuple[str, ...], value: str | int, text: str = STACK) -> str:
    return set_value("Pulumi.x.yaml", text, keys, value)


def test_a_flow_mapping_is_rewritten_with_its_comment():
    new = edit(("gpu-serving:triton", "replicas", "max"), 30)
    assert new == STACK.replace("{min: 2, max: 16}  # the HPA's bounds", "{min: 2, max: 30}  # the HPA's bounds")


def test_a_block_mapping_changes_one_line_and_keeps_its_comments():
    new = edit(("gpu-serving:gateway", "replicas", "max"), 40)
    assert new == STACK.replace("      max: 24\n", "      max: 40\n")
    assert edit(("gpu-serving:gateway", "replicas", "min"), 4) == STACK.replace("min: 3  # floor", "min: 4  # floor")


def test_a_missing_key_is_added_as_the_first_entry_of_its_mapping_and_quoted():
    new = edit(("gpu-serving:triton", "release"), "24.10")
    assert new == STACK.replace("  gpu-serving:triton:\n", '  gpu-serving:triton:\n    release: "24.10"\n')
    assert yaml.safe_load(new)["config"]["gpu-serving:triton"]["release"] == "24.10"  # not the float 24.1


def test_the_same_value_leaves_the_text_as_it_is():
    assert edit(("gpu-serving:triton", "replicas", "min"), 2) is STACK


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (("gpu-serving:driftAgent", "replicas", "max"), "gpu-serving:driftAgent: not found, or not a mapping"),
        (("gpu-serving:triton", "canary"), "gpu-serving:triton.canary: a block, not a value"),
        (("gpu-serving:triton", "namespace", "x"), "gpu-serving:triton.namespace: not found, or not a mapping"),
    ],
)
def test_what_cannot_be_placed_is_refused_naming_the_file_and_key(keys, message):
    with pytest.raises(StackEditError, match=f"^Pulumi.x.yaml: {message}"):
        edit(keys, 1)


def test_an_edit_that_would_change_another_key_is_refused():
    # YAML keeps the last of two equal keys; the text edit finds the first: the parse tells.
    line = "  gpu-serving:delivery: argocd\n"
    twice = STACK.replace(line, line + "  gpu-serving:delivery: x\n")
    with pytest.raises(StackEditError, match="gpu-serving:delivery: the edit would change other keys too"):
        edit(("gpu-serving:delivery",), "pulumi", twice)
