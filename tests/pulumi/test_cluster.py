"""Each stack names its cluster (gpu-serving:kubernetes): the config requires the context, `pulumi
up` refuses a context its kubeconfig lacks before creating anything, and every Kubernetes
resource of the program uses the one provider built from it."""

from pathlib import Path

import pytest
import yaml
from gpu_serving import kubeconfig
from gpu_serving.config import PULUMI_DIR, ConfigError, Kubernetes, check_context, from_stack_file
from gpu_serving.kubeconfig import KubeconfigError

from tests.pulumi.pulumi_mocks import KUBECONFIG, RecordingMocks, run_program, stack_config

CLUSTERS = {"dev": "kind-gpu-serving-dev", "staging": "gpu-serving-staging", "prod": "gpu-serving-prod"}
PROVIDER = "pulumi:providers:kubernetes"


def write_kubeconfig(path: Path, contexts: dict[str, str]) -> Path:
    """A kubeconfig with these contexts (name -> cluster)."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": c, "cluster": {"server": "https://k8s.example.test"}} for c in set(contexts.values())],
        "contexts": [{"name": name, "context": {"cluster": c, "user": "u"}} for name, c in contexts.items()],
        "users": [{"name": "u", "user": {}}],
    }
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def without_kubernetes(tmp_path: Path, change) -> str:
    document = yaml.safe_load((PULUMI_DIR / "Pulumi.prod.yaml").read_text(encoding="utf-8"))
    change(document["config"])
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        from_stack_file("prod", path)
    return str(info.value)


@pytest.mark.parametrize("env", sorted(CLUSTERS))
def test_every_stack_names_its_context_and_cluster(env):
    assert from_stack_file(env).kubernetes == Kubernetes(CLUSTERS[env], CLUSTERS[env], None)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda c: c.pop("gpu-serving:kubernetes"),
            "Pulumi.prod.yaml: gpu-serving:kubernetes.context: is required: the kubeconfig context of the cluster",
        ),
        (lambda c: c["gpu-serving:kubernetes"].pop("context"), "Pulumi.prod.yaml: gpu-serving:kubernetes.context: is"),
        (lambda c: c["gpu-serving:kubernetes"].pop("cluster"), "Pulumi.prod.yaml: gpu-serving:kubernetes.cluster: is"),
        (
            lambda c: c["gpu-serving:kubernetes"].update(contxt="x"),
            "Pulumi.prod.yaml: gpu-serving:kubernetes.contxt: unknown field (known: context, cluster, kubeconfig)",
        ),
    ],
    ids=["no-kubernetes", "no-context", "no-cluster", "misspelt"],
)
def test_a_stack_without_its_cluster_is_refused_naming_the_file_and_key(tmp_path, change, expected):
    assert without_kubernetes(tmp_path, change).startswith(expected)


def test_a_kubeconfig_key_is_a_path_from_pulumi(tmp_path):
    document = yaml.safe_load((PULUMI_DIR / "Pulumi.prod.yaml").read_text(encoding="utf-8"))
    document["config"]["gpu-serving:kubernetes"]["kubeconfig"] = "../.kube/prod.yaml"
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    assert from_stack_file("prod", path).kubernetes.kubeconfig == PULUMI_DIR / "../.kube/prod.yaml"


def test_the_provider_reads_the_configured_kubeconfig_else_kubeconfig_else_the_home_one(tmp_path):
    configured = tmp_path / "configured"
    assert kubeconfig.files(configured, {"KUBECONFIG": "/a"}) == (configured,)
    assert kubeconfig.files(None, {"KUBECONFIG": f"/a:{tmp_path}/b:"}) == (Path("/a"), tmp_path / "b")
    assert kubeconfig.files(None, {}) == (Path.home() / ".kube/config",)


def test_contexts_merge_as_kubectl_merges_them_and_a_missing_file_is_skipped(tmp_path):
    first = write_kubeconfig(tmp_path / "first", {"a": "cluster-a", "shared": "from-first"})
    second = write_kubeconfig(tmp_path / "second", {"b": "cluster-b", "shared": "from-second"})
    merged = kubeconfig.contexts([first, tmp_path / "missing", second])
    assert merged == {"a": "cluster-a", "shared": "from-first", "b": "cluster-b"}


def test_an_unknown_context_is_refused_naming_the_kubeconfig_and_its_contexts(tmp_path):
    path = write_kubeconfig(tmp_path / "config", {"kind-other": "kind-other", "staging": "gpu-serving-staging"})
    with pytest.raises(KubeconfigError) as info:
        kubeconfig.check("gpu-serving-prod", "gpu-serving-prod", [path])
    assert info.value.field == "context"
    assert (
        str(info.value)
        == f"'gpu-serving-prod' is not a context of the kubeconfig {path} (its contexts: kind-other, staging)"
    )


def test_a_context_of_another_cluster_is_refused_naming_the_cluster_key(tmp_path):
    path = write_kubeconfig(tmp_path / "config", {"gpu-serving-prod": "gpu-serving-staging"})
    with pytest.raises(KubeconfigError) as info:
        kubeconfig.check("gpu-serving-prod", "gpu-serving-prod", [path])
    assert info.value.field == "cluster"
    assert "points at the cluster 'gpu-serving-staging', not 'gpu-serving-prod'" in str(info.value)


def test_no_kubeconfig_at_all_is_refused(tmp_path):
    with pytest.raises(KubeconfigError, match=f"there is no kubeconfig at {tmp_path}/none"):
        kubeconfig.check("c", "c", [tmp_path / "none"])


def test_the_stack_check_names_the_stack_file_the_key_and_the_kubeconfig(tmp_path):
    path = write_kubeconfig(tmp_path / "config", {"kind-other": "kind-other"})
    with pytest.raises(ConfigError) as info:
        check_context(from_stack_file("prod"), {"KUBECONFIG": str(path)})
    assert str(info.value) == (
        f"Pulumi.prod.yaml: gpu-serving:kubernetes.context: 'gpu-serving-prod' is not a context of the kubeconfig "
        f"{path} (its contexts: kind-other)"
    )
    check_context(from_stack_file("prod"), {"KUBECONFIG": str(KUBECONFIG)})


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_an_unknown_context_stops_the_program_before_any_resource(tmp_path, env):
    mocks = RecordingMocks()
    with pytest.raises(ConfigError) as info:
        run_program(env, mocks=mocks, kubeconfig=write_kubeconfig(tmp_path / "config", {"kind-other": "kind-other"}))
    assert mocks.resources == []
    assert str(info.value).startswith(f"Pulumi.{env}.yaml: gpu-serving:kubernetes.context: '{CLUSTERS[env]}' is not")


def test_a_configured_kubeconfig_that_does_not_exist_stops_the_program_before_any_resource(tmp_path):
    kube = {**yaml.safe_load(stack_config("prod")["gpu-serving:kubernetes"]), "kubeconfig": str(tmp_path / "none")}
    mocks = RecordingMocks()
    with pytest.raises(ConfigError, match=f"gpu-serving:kubernetes.context: there is no kubeconfig at {tmp_path}/none"):
        run_program("prod", {"kubernetes": kube}, mocks=mocks)
    assert mocks.resources == []


@pytest.mark.parametrize("env", sorted(CLUSTERS))
def test_every_kubernetes_resource_uses_the_one_provider_of_the_stacks_cluster(env):
    mocks = run_program(env)
    (provider,) = mocks.of_type(PROVIDER)
    assert provider.inputs["context"] == provider.inputs["cluster"] == CLUSTERS[env]
    kubernetes = [r for r in mocks.resources if r.typ.startswith("kubernetes:")]
    assert len(kubernetes) >= 8  # charts, ConfigGroups, Secrets, AppProjects, Applications
    # A provider reference is `<urn>::<id>`; the default provider's would be another, or none.
    urn = f"urn:pulumi:{env}::gpu-serving::pulumi:pulumi:Stack${PROVIDER}::{provider.name}"
    assert {r.provider for r in kubernetes} == {f"{urn}::{provider.name}-id"}


def test_the_provider_reads_the_kubeconfig_the_stack_names(tmp_path):
    path = write_kubeconfig(tmp_path / "prod.yaml", {CLUSTERS["prod"]: CLUSTERS["prod"]})
    kube = {**yaml.safe_load(stack_config("prod")["gpu-serving:kubernetes"]), "kubeconfig": str(path)}
    (provider,) = run_program("prod", {"kubernetes": kube}, kubeconfig=tmp_path / "unused").of_type(PROVIDER)
    assert provider.inputs["kubeconfig"] == str(path)
