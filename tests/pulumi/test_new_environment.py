"""scripts/new-environment (gpu_serving.new_environment) in a copy of the repository's stacks and
inventories: what it writes and prints, what it refuses, and render refusing each placeholder
left until every one is filled."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from gpu_serving import config, markers, placeholders
from gpu_serving.config import IRSA_ANNOTATION, ConfigError, Kubernetes, from_stack_file
from gpu_serving.new_environment import main
from gpu_serving.render import main as render_main
from gpu_serving.render import render, write

from monitoring import alerting
from tests.pulumi.pulumi_mocks import RecordingMocks, run_program

ROOT = Path(__file__).resolve().parents[2]
STACK = "pulumi/Pulumi.edge.yaml"
HOSTS = "inventories/edge/hosts.yml"
# What someone fills in, by placeholder; the hosts: a mapping of host names.
FILLED = {
    "kubernetes.context": "edge-admin@edge",
    "kubernetes.cluster": "edge",
    "gitRepoURL": "https://git.corp.test/ml/gpu-serving-iac.git",
    "triton.modelRepository": "s3://corp-models/edge",
    f"triton.serviceAccountAnnotations.{IRSA_ANNOTATION}": "arn:aws:iam::210987654321:role/edge-model-reader",
    "gateway.image.repository": "registry.corp.test/gpu-serving/gateway",
    "driftAgent.image.repository": "registry.corp.test/gpu-serving/drift-agent",
}
SITE_VALUES = ("example.com", "ghcr.io", "gpu-serving-models", "123456789012")


@pytest.fixture
def repository(tmp_path, monkeypatch) -> Path:
    """A copy of pulumi/Pulumi.*.yaml and inventories/, where config (and so the script and render) looks."""
    (tmp_path / "pulumi").mkdir()
    for stack in config.PULUMI_DIR.glob("Pulumi.*.yaml"):
        shutil.copy(stack, tmp_path / "pulumi")
    shutil.copytree(ROOT / "inventories", tmp_path / "inventories")
    monkeypatch.setattr(config, "PULUMI_DIR", tmp_path / "pulumi")
    return tmp_path


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def listed(out: str) -> set[tuple[str, str]]:
    """The (file, key) pairs of the printed placeholder list."""
    lines = out.split("Fill every placeholder", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    return {tuple(line.strip().split(": ", 1)) for line in lines if not line.startswith("   ")}


def left(repository: Path) -> set[tuple[str, str]]:
    """Every placeholder in the new stack's config and its inventory, as config.py finds them."""
    document = yaml.safe_load((repository / STACK).read_text(encoding="utf-8"))
    found = {(STACK, key) for key, _ in markers.in_data(document["config"])}
    return found | {
        (path.relative_to(repository).as_posix(), key)
        for path, key, _ in markers.in_inventory(repository / "inventories/edge")
    }


def values(data, key=""):
    """(key, value) of every scalar."""
    if isinstance(data, dict):
        for name, value in data.items():
            yield from values(value, f"{key}.{name}")
    elif isinstance(data, list):
        for index, item in enumerate(data):
            yield from values(item, f"{key}[{index}]")
    else:
        yield key, str(data)


def fill(repository: Path, keys=tuple(FILLED), hosts: bool = True) -> None:
    """Replace placeholders as a person would: in the text, keeping the rest."""
    path = repository / STACK
    text = path.read_text(encoding="utf-8")
    for placeholder in placeholders.STACK:
        if placeholder.key in keys:
            text = text.replace(json.dumps(markers.marker(placeholder.what)), json.dumps(FILLED[placeholder.key]))
    path.write_text(text, encoding="utf-8")
    if hosts:
        fleet = {"all": {"children": {"gpu_nodes": {"hosts": {"gpu-e[01:02].corp.test": None}}}}}
        fleet["all"]["children"]["k8s_control_plane"] = {"hosts": {"cp-e01.corp.test": None}}
        (repository / HOSTS).write_text(yaml.safe_dump(fleet), encoding="utf-8")


def test_from_prod_it_writes_the_stack_and_inventory_and_prints_every_placeholder(repository, capsys):
    assert main(["edge", "--from", "prod"]) == 0
    out = capsys.readouterr().out
    assert (
        listed(out)
        == left(repository)
        == {
            *((STACK, f"gpu-serving:{key}") for key in FILLED),
            (HOSTS, "all.children.gpu_nodes.hosts"),
            (HOSTS, "all.children.k8s_control_plane.hosts"),
        }
    )
    for key in config.secret_keys(alerting.load()):
        assert f"pulumi config set --secret {key}" in out
    # The copy is prod's config but for the placeholders and its own inventory; its comments stay.
    text = (repository / STACK).read_text(encoding="utf-8")
    copy, prod = (yaml.safe_load(t)["config"] for t in (text, (repository / "pulumi/Pulumi.prod.yaml").read_text()))
    assert copy.pop("gpu-serving:fleetInventory") == "../inventories/edge"
    prod.pop("gpu-serving:fleetInventory")
    for key in ("gpu-serving:kubernetes", "gpu-serving:gitRepoURL", "gpu-serving:triton", "gpu-serving:gateway"):
        assert copy[key] != prod[key]
    assert "# Argo Rollouts' canary of every new pod template" in text
    assert text.startswith("---\n# edge: a new environment, written by scripts/new-environment from Pulumi.prod.yaml.")
    assert not any(site in value for _, value in values(copy) for site in SITE_VALUES)
    # The inventory: prod's group_vars as they are, and no prod host.
    inventory = tree(repository / "inventories/edge")
    prod = tree(repository / "inventories/prod")
    assert inventory.pop("hosts.yml") != prod.pop("hosts.yml")
    assert inventory == prod
    assert ".prod.example.com" not in (repository / HOSTS).read_text(encoding="utf-8")


def test_from_dev_the_lab_inventory_gets_a_hosts_file_of_placeholders(repository, capsys):
    assert main(["edge", "--from", "dev"]) == 0
    assert (HOSTS, "all.children.gpu_nodes.hosts") in listed(capsys.readouterr().out)
    assert (repository / "inventories/edge/group_vars/gpu_nodes/fleet.yml").read_bytes() == (
        repository / "inventories/lab/group_vars/gpu_nodes/fleet.yml"
    ).read_bytes()


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["Edge", "--from", "prod"], "'Edge' is not an environment name"),
        (["../edge", "--from", "prod"], "'../edge' is not an environment name"),
        (["e" * 64, "--from", "prod"], "is not an environment name"),
        (["staging", "--from", "prod"], "pulumi/Pulumi.staging.yaml exists already"),
        (["lab", "--from", "dev"], "inventories/lab exists already"),
        (["edge", "--from", "nope"], "--from nope: there is no stack file pulumi/Pulumi.nope.yaml (stacks: dev, prod"),
        (["edge", "--from", "../pulumi/Pulumi.prod"], "--from ../pulumi/Pulumi.prod: there is no stack file"),
    ],
    ids=["upper-case", "a-path", "too-long", "stack-exists", "inventory-exists", "unknown-from", "from-a-path"],
)
def test_a_bad_name_or_source_is_refused_with_nothing_written(repository, capsys, argv, reason):
    before = tree(repository)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("new-environment: ") and reason in err and err.endswith("; nothing written\n")
    assert tree(repository) == before


def test_a_source_that_does_not_pass_is_refused_naming_its_file_and_key(repository, capsys):
    path = repository / "pulumi/Pulumi.prod.yaml"
    path.write_text(path.read_text().replace("context: gpu-serving-prod\n", ""), encoding="utf-8")
    before = tree(repository)
    assert main(["edge", "--from", "prod"]) == 2
    assert "--from prod: Pulumi.prod.yaml: gpu-serving:kubernetes.context: is required" in capsys.readouterr().err
    assert tree(repository) == before


def test_the_sources_secrets_and_model_release_are_not_copied(repository, capsys):
    digest = "ab" * 32
    path = repository / "pulumi/Pulumi.prod.yaml"
    path.write_text(
        path.read_text().replace("---\n", "---\nencryptionsalt: v1:c2FsdA==:v1:aXY=:Y2lwaGVy\n", 1)
        + "  gpu-serving:grafanaAdminPassword:\n    secure: v1:aXY=:Y2lwaGVydGV4dA==\n"
        + "  # The model release Triton serves, written by scripts/release_model.\n"
        + f"  gpu-serving:modelRelease:\n    uri: s3://gpu-serving-models/prod/sha256-{digest}\n"
        + f"    digest: sha256:{digest}\n    sizeBytes: 1024\n",
        encoding="utf-8",
    )
    from_stack_file("prod")  # the source passes as it is
    assert main(["edge", "--from", "prod"]) == 0
    out = capsys.readouterr().out
    text = (repository / STACK).read_text(encoding="utf-8")
    for gone in ("encryptionsalt", "secure:", "modelRelease", "release_model.", digest):
        assert gone not in text
    for key in ("encryptionsalt", "gpu-serving:grafanaAdminPassword", "gpu-serving:modelRelease"):
        assert f"  {key}: " in out.split("Not copied from prod:", 1)[1]


def test_a_dropped_secret_takes_its_own_lines_and_leaves_the_next_keys_comment(repository, capsys):
    path = repository / "pulumi/Pulumi.prod.yaml"
    text = path.read_text(encoding="utf-8")
    comment = "  # The Triton settings of this environment (kept)."
    text = text.replace(
        "\n  gpu-serving:triton:\n",
        "\n  gpu-serving:grafanaAdminPassword:\n    secure: v1:aXY=:Y2lwaGVydGV4dA==\n"
        f"{comment}\n  gpu-serving:triton:\n",
        1,
    )
    path.write_text(text, encoding="utf-8")
    assert main(["edge", "--from", "prod"]) == 0
    written = (repository / STACK).read_text(encoding="utf-8")
    assert "secure:" not in written
    assert f"{comment}\n  gpu-serving:triton:\n" in written


def test_render_refuses_each_placeholder_left_naming_the_file_and_key_and_leaves_the_render(repository, capsys):
    assert main(["edge", "--from", "prod"]) == 0
    out = repository / "deploy/serving/edge"
    write({"root.yaml": "---\n# an earlier render\n"}, out)
    capsys.readouterr()
    before = tree(out)
    assert render_main(["--env", "edge", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "render: Pulumi.edge.yaml: gpu-serving:kubernetes.context: is a placeholder to fill, "
        "<fill: the kubeconfig context of this environment's cluster> (9 left: Pulumi.edge.yaml: "
        "gpu-serving:kubernetes.context; Pulumi.edge.yaml: gpu-serving:kubernetes.cluster;"
    )
    assert "inventories/edge/hosts.yml: all.children.k8s_control_plane.hosts)" in err
    # Every stack value filled: the inventory's placeholders still stop it.
    fill(repository, hosts=False)
    assert render_main(["--env", "edge", "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith(
        "render: inventories/edge/hosts.yml: all.children.gpu_nodes.hosts: is a placeholder to fill"
    )
    assert tree(out) == before


def test_pulumi_up_refuses_a_placeholder_before_any_resource():
    mocks = RecordingMocks()
    with pytest.raises(ConfigError) as info:
        run_program("prod", {"gitRepoURL": markers.marker("the clone URL")}, mocks=mocks)
    assert mocks.resources == []
    assert str(info.value) == (
        "Pulumi.prod.yaml: gpu-serving:gitRepoURL: is a placeholder to fill, <fill: the clone URL> "
        "(1 left: Pulumi.prod.yaml: gpu-serving:gitRepoURL)"
    )


def test_once_every_placeholder_is_filled_the_new_environment_renders(repository, capsys):
    assert main(["edge", "--from", "prod"]) == 0
    fill(repository)
    out = repository / "deploy/serving/edge"
    assert render_main(["--env", "edge", "--out", str(out)]) == 0
    cfg = from_stack_file("edge")
    assert cfg.kubernetes == Kubernetes("edge-admin@edge", "edge", None)
    assert cfg.triton.model_repository == "s3://corp-models/edge"
    fleet = repository / "inventories/edge/group_vars/gpu_nodes/fleet.yml"
    assert cfg.inventory == "edge" and cfg.fleet == replace(from_stack_file("prod").fleet, path=fleet)
    root = yaml.safe_load((out / "root.yaml").read_text(encoding="utf-8"))
    assert root["spec"]["source"] == {
        "repoURL": FILLED["gitRepoURL"],
        "targetRevision": "main",
        "path": "deploy/serving/edge/apps",
    }
    assert sorted(render(cfg)) == sorted(render(from_stack_file("prod")))
