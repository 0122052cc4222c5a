"""`scripts/runbook desired ...` on a clone of this working tree (conftest.py): each change edits
the stack file, renders deploy/serving/<env>/ with the real renderer, and prints a commit that the
test then makes; each refusal leaves the stack file and the render exactly as they were."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from serving.release.content import ReleaseContent, ReleaseFile
from serving.release.index import record_path, write_record
from serving.release.stack import Reference, read_reference, release_uri, store_of, write_reference
from serving.runbook.cli import main
from tests.runbook.conftest import git

RELEASE_ANNOTATION = "gpu-serving.example.com/model-release"


def runbook(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["desired", *args, "--repo", str(root)])
    out, err = capsys.readouterr()
    return code, out, err


def state(root: Path, env: str) -> dict[str, bytes]:
    """The stack file and every rendered file of the environment, byte for byte."""
    files = [root / f"pulumi/Pulumi.{env}.yaml", *sorted((root / f"deploy/serving/{env}").rglob("*"))]
    return {str(path.relative_to(root)): path.read_bytes() for path in files if path.is_file()}


def config(root: Path, env: str) -> dict[str, Any]:
    return yaml.safe_load((root / f"pulumi/Pulumi.{env}.yaml").read_text())["config"]


def manifest(root: Path, env: str, kind: str, name: str) -> dict[str, Any]:
    (path,) = (root / f"deploy/serving/{env}/manifests").glob(f"*-{kind}-{name}.yaml")
    return yaml.safe_load(path.read_text())


def changed(root: Path) -> set[str]:
    return {line[3:] for line in git(root, "status", "--porcelain", "--untracked-files=all").splitlines()}


def commit_as_printed(root: Path, out: str) -> None:
    """Run the `git add ... && git commit ...` line the command printed; the tree is clean after it."""
    (line,) = [line.strip() for line in out.splitlines() if line.strip().startswith("git add ")]
    subprocess.run(["bash", "-c", line], cwd=root, capture_output=True, text=True, check=True)
    assert changed(root) == set()


def test_scale_writes_the_bounds_renders_them_and_prints_the_commit(checkout_root, capsys):
    before = (checkout_root / "pulumi/Pulumi.prod.yaml").read_text()
    was = config(checkout_root, "prod")["gpu-serving:triton"]["replicas"]
    code, out, err = runbook(checkout_root, capsys, "scale", "--env", "prod", "--min", "4", "--max", "24")
    assert code == 0, err
    after = (checkout_root / "pulumi/Pulumi.prod.yaml").read_text()
    edited = [(old, new) for old, new in zip(before.splitlines(), after.splitlines(), strict=True) if old != new]
    assert [new.strip() for _, new in edited] == ["replicas: {min: 4, max: 24}"]  # every other line, comments too
    assert config(checkout_root, "prod")["gpu-serving:triton"]["replicas"] == {"min": 4, "max": 24}
    hpa = manifest(checkout_root, "prod", "horizontalpodautoscaler", "triton")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (4, 24)
    paths = changed(checkout_root)
    assert all(path == "pulumi/Pulumi.prod.yaml" or path.startswith("deploy/serving/prod/") for path in paths)
    assert "deploy/serving/prod/manifests/08-horizontalpodautoscaler-triton.yaml" in paths
    assert "nothing was sent to the cluster" in out
    assert re.search(r"^ pulumi/Pulumi\.prod\.yaml +\| +2 \+-$", out, re.MULTILINE), out  # git diff --stat
    ((old, new),) = edited
    assert f"-{old}\n+{new}\n" in out
    assert "  git add pulumi/Pulumi.prod.yaml deploy/serving/prod && git commit -m " in out
    commit_as_printed(checkout_root, out)
    subject = f"prod: triton replicas {{min: 4, max: 24}} (was {{min: {was['min']}, max: {was['max']}}})\n"
    assert git(checkout_root, "log", "-1", "--format=%s") == subject


def test_scale_keeps_the_bound_not_given_and_scales_the_gateway_too(checkout_root, capsys):
    replicas = config(checkout_root, "staging")["gpu-serving:gateway"]["replicas"]
    code, _, err = runbook(checkout_root, capsys, "scale", "--env", "staging", "--workload", "gateway", "--max", "40")
    assert code == 0, err
    assert config(checkout_root, "staging")["gpu-serving:gateway"]["replicas"] == {**replicas, "max": 40}
    hpa = manifest(checkout_root, "staging", "horizontalpodautoscaler", "gateway")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (replicas["min"], 40)


def test_triton_release_pins_a_matrix_release_and_renders_its_image(checkout_root, capsys):
    code, out, err = runbook(checkout_root, capsys, "triton-release", "--env", "prod", "--release", "23.09")
    assert code == 0, err
    assert config(checkout_root, "prod")["gpu-serving:triton"]["release"] == "23.09"  # a string, not the float 23.09
    (container,) = manifest(checkout_root, "prod", "rollout", "triton")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "nvcr.io/nvidia/tritonserver:23.09-py3"
    commit_as_printed(checkout_root, out)
    code, out, _ = runbook(checkout_root, capsys, "triton-release", "--env", "prod", "--release", "23.09")
    assert code == 0 and "already so; nothing to change" in out and changed(checkout_root) == set()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["scale", "--env", "prod", "--min", "8", "--max", "4"], "triton.replicas.max: must be an integer >= 8"),
        (["scale", "--env", "dev", "--min", "0"], "triton.replicas.min: must be an integer >= 1, got 0"),
        (["triton-release", "--env", "prod", "--release", "99.01"], "triton.release: Triton '99.01' is not in"),
    ],
)
def test_a_refused_render_leaves_the_stack_file_and_the_render_as_they_were(checkout_root, capsys, args, message):
    env = args[2]
    before = state(checkout_root, env)
    code, out, err = runbook(checkout_root, capsys, *args)
    assert code == 1 and out == ""
    assert f"Pulumi.{env}.yaml: gpu-serving:{message}" in err and f"make render ENV={env}" in err
    assert f"pulumi/Pulumi.{env}.yaml and deploy/serving/{env}/ are left as they were" in err
    assert state(checkout_root, env) == before
    assert changed(checkout_root) == set()


@pytest.mark.parametrize(
    ("replicas", "message"),
    [
        ("", "gpu-serving:triton.replicas: not found, or not a mapping: no place for gpu-serving:triton.replicas.max"),
        ("\n    replicas: {min: 2,\n      max: 16}", "gpu-serving:triton.replicas: not a one-line mapping of values"),
    ],
)
def test_a_key_that_cannot_be_placed_is_refused_naming_the_file_and_key(checkout_root, capsys, replicas, message):
    stack = checkout_root / "pulumi/Pulumi.prod.yaml"
    stack.write_text(re.sub(r"\n    replicas: \{[^}]*\}", replicas, stack.read_text(), count=1))
    git(checkout_root, "commit", "-q", "-am", "triton's replicas as no text edit can place them")
    before = state(checkout_root, "prod")
    code, _, err = runbook(checkout_root, capsys, "scale", "--env", "prod", "--max", "4")
    assert code == 1
    assert f"pulumi/Pulumi.prod.yaml: {message}" in err
    assert state(checkout_root, "prod") == before


def test_uncommitted_changes_before_the_command_are_named(checkout_root, capsys):
    stack = checkout_root / "pulumi/Pulumi.dev.yaml"
    stack.write_text(stack.read_text() + "# a note by hand\n")
    code, out, _ = runbook(checkout_root, capsys, "scale", "--env", "dev", "--max", "3")
    assert code == 0
    assert "note: uncommitted changes were there before this command" in out and " M pulumi/Pulumi.dev.yaml" in out
    assert stack.read_text().endswith("# a note by hand\n")


def _publish(root: Path, env: str, name: str) -> Reference:
    """What `scripts/release_model publish` leaves in git, without a store: a record and the
    stack file's reference, in one commit (not rendered: the command under test renders)."""
    data = name.encode()
    model = ReleaseFile(f"{name}/1/model.onnx", "100644", len(data), hashlib.sha256(data).hexdigest())
    content = ReleaseContent((model,))
    stack = root / f"pulumi/Pulumi.{env}.yaml"
    reference = Reference(release_uri(store_of(stack), content.digest), content.digest, content.size_bytes)
    write_record(root / "model_releases", content, reference.uri)
    write_reference(stack, reference)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"{env}: model release {name}")
    return reference


def test_model_rollback_goes_back_to_the_previous_release_of_the_history(checkout_root, capsys):
    first = _publish(checkout_root, "prod", "first")
    _publish(checkout_root, "prod", "second")
    code, out, err = runbook(checkout_root, capsys, "model-rollback", "--env", "prod")
    assert code == 0, err
    assert read_reference(checkout_root / "pulumi/Pulumi.prod.yaml") == first
    template = manifest(checkout_root, "prod", "rollout", "triton")["spec"]["template"]
    assert template["metadata"]["annotations"][RELEASE_ANNOTATION] == first.digest
    assert "(prod: model release first)" in out
    record = record_path(Path("model_releases"), first.digest)
    assert f"  git add pulumi/Pulumi.prod.yaml deploy/serving/prod {record} && git commit -m " in out
    commit_as_printed(checkout_root, out)


def test_a_second_rollback_goes_further_back_not_to_the_release_rolled_back(checkout_root, capsys):
    """History A, B, C, then a rollback to B: B turns out bad too, and the next rollback is A."""
    first = _publish(checkout_root, "prod", "first")
    second = _publish(checkout_root, "prod", "second")
    _publish(checkout_root, "prod", "third")
    code, out, err = runbook(checkout_root, capsys, "model-rollback", "--env", "prod")
    assert code == 0, err
    assert read_reference(checkout_root / "pulumi/Pulumi.prod.yaml") == second
    commit_as_printed(checkout_root, out)
    code, out, err = runbook(checkout_root, capsys, "model-rollback", "--env", "prod")
    assert code == 0, err
    assert read_reference(checkout_root / "pulumi/Pulumi.prod.yaml") == first
    assert "(prod: model release first)" in out


def test_model_rollback_of_the_first_release_removes_the_reference(checkout_root, capsys):
    before = state(checkout_root, "staging")
    _publish(checkout_root, "staging", "first")
    code, out, err = runbook(checkout_root, capsys, "model-rollback", "--env", "staging")
    assert code == 0, err
    assert "-> no model release (gpu-serving:triton.modelRepository)" in out
    assert state(checkout_root, "staging") == before  # the stack file and render from before that release


def test_model_rollback_to_a_named_published_release(checkout_root, capsys):
    first = _publish(checkout_root, "prod", "first")
    _publish(checkout_root, "prod", "second")
    code, _, err = runbook(checkout_root, capsys, "model-rollback", "--env", "prod", "--to", first.digest)
    assert code == 0, err
    assert read_reference(checkout_root / "pulumi/Pulumi.prod.yaml") == first


def test_an_unpublished_release_is_refused_naming_the_command_that_publishes_it(checkout_root, capsys):
    _publish(checkout_root, "prod", "first")
    staging_only = _publish(checkout_root, "staging", "elsewhere")
    before = state(checkout_root, "prod")
    never = "sha256:" + "0" * 64
    code, _, err = runbook(checkout_root, capsys, "model-rollback", "--env", "prod", "--to", never)
    assert code == 1
    assert f"{never} was never published: no publication record model_releases/sha256-{'0' * 64}.json" in err
    assert "publish it with scripts/release_model publish --env prod" in err
    code, _, err = runbook(checkout_root, capsys, "model-rollback", "--env", "prod", "--to", staging_only.digest)
    assert code == 1
    record = record_path(checkout_root.resolve() / "model_releases", staging_only.digest)
    assert f"was never published: {record} lists" in err
    assert "publish it with scripts/release_model publish --env prod" in err
    assert "pulumi/Pulumi.prod.yaml and deploy/serving/prod/ are left as they were" in err
    assert state(checkout_root, "prod") == before and changed(checkout_root) == set()


def test_model_rollback_without_an_earlier_reference_is_refused(checkout_root, capsys):
    code, _, err = runbook(checkout_root, capsys, "model-rollback", "--env", "dev")
    assert code == 1
    assert "pulumi/Pulumi.dev.yaml: gpu-serving:modelRelease: nothing to roll back to" in err
    assert "--to sha256:<hex>" in err and changed(checkout_root) == set()


def test_no_checkout_or_no_stack_file_is_bad_usage(checkout_root, tmp_path, capsys):
    code, _, err = runbook(checkout_root, capsys, "scale", "--env", "qa", "--max", "3")
    stacks = (checkout_root / "pulumi").glob("Pulumi.*.yaml")
    environments = ", ".join(sorted(path.name.split(".")[1] for path in stacks))
    assert code == 2 and f"pulumi/Pulumi.qa.yaml: no such stack file (environments: {environments})" in err
    elsewhere = tmp_path / "not-a-checkout"
    elsewhere.mkdir()
    code, _, err = runbook(elsewhere, capsys, "scale", "--env", "prod", "--max", "3")
    assert code == 2 and "is not a git checkout" in err
