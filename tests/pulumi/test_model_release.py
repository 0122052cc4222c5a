"""A model release in the stack config: Triton's pod template reads it from its content-addressed
prefix, localizes it into a volume sized from it, and changes with it (a new Rollout revision);
every environment has the store's credentials; bad references name the file and key."""

import copy
from pathlib import Path

import pytest
from gpu_serving.config import ConfigError, from_stack_file
from gpu_serving.model_store import MODELS_HEADROOM_MI, MOUNT, RELEASE_ANNOTATION
from gpu_serving.triton import rollout, triton_pod_template

from tests.pulumi.test_config import ENVS, broken, stack_document, write_stack

GIB = 1 << 30


def _release(env: str, hex_digit: str = "a", size: int = 3 * GIB) -> dict:
    hex_digest = hex_digit * 64
    return {
        "uri": f"s3://gpu-serving-models/{env}/sha256-{hex_digest}",
        "digest": f"sha256:{hex_digest}",
        "sizeBytes": size,
    }


def _with_release(tmp_path: Path, env: str, release: dict):
    document = copy.deepcopy(stack_document(env))
    document["config"]["gpu-serving:modelRelease"] = release
    return from_stack_file(env, write_stack(tmp_path, env, document))


@pytest.mark.parametrize("env", ENVS)
def test_the_pod_template_serves_the_release_from_a_volume_sized_from_it(tmp_path, env):
    release = _release(env)
    template = triton_pod_template(_with_release(tmp_path, env, release))
    container = template["spec"]["containers"][0]
    assert f"--model-repository={release['uri']}" in container["args"]
    assert template["metadata"]["annotations"][RELEASE_ANNOTATION] == release["digest"]
    assert {"name": "TRITON_AWS_MOUNT_DIRECTORY", "value": MOUNT} in container["env"]
    assert {"name": "models", "mountPath": MOUNT} in container["volumeMounts"]
    limit = f"{6 * 1024 + MODELS_HEADROOM_MI}Mi"  # twice the 3 GiB release, plus headroom
    assert {"name": "models", "emptyDir": {"sizeLimit": limit}} in template["spec"]["volumes"]
    assert container["resources"]["requests"]["ephemeral-storage"] == limit


def test_a_new_release_is_a_new_pod_template_and_nothing_else_changes(tmp_path):
    first = _with_release(tmp_path, "prod", _release("prod", "a"))
    second = _with_release(tmp_path, "prod", _release("prod", "b"))
    assert triton_pod_template(first) != triton_pod_template(second)
    one, two = rollout(first), rollout(second)
    one["spec"].pop("template"), two["spec"].pop("template")
    assert one == two  # steps, routing, selector: the same Rollout, a new revision


@pytest.mark.parametrize("env", ENVS)
def test_without_a_release_triton_reads_the_stack_repository_as_before(env):
    cfg = from_stack_file(env)
    template = triton_pod_template(cfg)
    assert f"--model-repository={cfg.triton.model_repository}" in template["spec"]["containers"][0]["args"]
    assert RELEASE_ANNOTATION not in template["metadata"]["annotations"]


@pytest.mark.parametrize("env", ENVS)
def test_every_environment_has_the_stores_credentials(env):
    cfg = from_stack_file(env)
    template = triton_pod_template(cfg)
    irsa = cfg.triton.service_account_annotations.get("eks.amazonaws.com/role-arn")
    secret = template["spec"]["containers"][0].get("envFrom")
    assert bool(irsa) != bool(secret), "exactly one kind of credentials"
    if secret:
        assert secret == [{"secretRef": {"name": cfg.triton.model_store_secret}}]
        assert any(value.startswith("CKV_K8S_35=") for value in rollout(cfg)["metadata"]["annotations"].values())


def test_an_environment_without_credentials_is_refused(tmp_path):
    message = broken(tmp_path, "staging", "triton", lambda t: t.pop("serviceAccountAnnotations"))
    assert message.startswith("Pulumi.staging.yaml: gpu-serving:triton.modelStoreSecret: Triton reads s3:// without")
    message = broken(tmp_path, "prod", "triton", lambda t: t.update(modelStoreSecret="triton-model-store"))
    assert message.startswith("Pulumi.prod.yaml: gpu-serving:triton.modelStoreSecret: set a Secret or")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda r: r.update(uri=r["uri"].replace("/prod/", "/staging/")),
            "modelRelease.uri: 's3://gpu-serving-models/staging/",
        ),
        (lambda r: r.update(digest="sha256:" + "c" * 64), "modelRelease.uri: "),
        (lambda r: r.update(digest="sha256:12"), "modelRelease.digest: 'sha256:12' does not match"),
        (lambda r: r.update(sizeBytes=0), "modelRelease.sizeBytes: must be an integer >= 1"),
        (lambda r: r.update(tag="v2"), "modelRelease.tag: unknown field"),
    ],
)
def test_a_bad_release_reference_names_the_file_and_key(tmp_path, change, expected):
    release = _release("prod")
    change(release)
    document = copy.deepcopy(stack_document("prod"))
    document["config"]["gpu-serving:modelRelease"] = release
    with pytest.raises(ConfigError) as info:
        from_stack_file("prod", write_stack(tmp_path, "prod", document))
    assert str(info.value).startswith(f"Pulumi.prod.yaml: gpu-serving:{expected}"), str(info.value)
