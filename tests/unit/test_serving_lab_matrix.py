"""The matrix's `serving_lab` section: its shape, its references, and the pip lines it prints; and
what the lab's Triton release proves of the releases the environments deploy, as the docs say it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import yaml

from platform_matrix import MatrixError, load
from platform_matrix.__main__ import main as cli
from platform_matrix.matrix import parse
from tests.unit.test_platform_matrix import mutate, raw

ROOT = Path(__file__).resolve().parents[2]
PULUMI_DIR = ROOT / "pulumi"
ENVS = sorted(path.name.split(".")[1] for path in PULUMI_DIR.glob("Pulumi.*.yaml"))
# The page that lists each environment's release beside what the lab runs (`make docs`).
VERSIONS_PAGE = "docs/versions.md"
# Where the repository says what the serving lab proves, and the sentence each must carry.
SUMMARY_DOCS = ("docs/testing.md", "tests/serving_lab/README.md", VERSIONS_PAGE)
# Every file that talks about the lab's release; none may say it runs a deployed release unless one does.
CLAIM_DOCS = (*SUMMARY_DOCS, "README.md", "lab_fleet/README.md", "platform_matrix/README.md")
CLAIM_DOCS += ("platform_matrix/matrix.yml", "platform_matrix/matrix.py")
CLAIM = re.compile(r"one of the deployed releases|\bruns? (?:a|the) deployed release", re.IGNORECASE)


@pytest.fixture(scope="module")
def deployed() -> dict[str, str]:
    """{environment: the Triton release it deploys}, read by the stack's own config reader."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(PULUMI_DIR))
        config = importlib.import_module("gpu_serving.config")
        return {env: config.from_stack_file(env).triton.release for env in ENVS}


def rendered_release(env: str) -> str:
    """The release of the Triton image in the Rollout that Argo CD syncs from deploy/serving/<env>/."""
    matrix = load()
    (path,) = (ROOT / "deploy/serving" / env / "manifests").glob("*-rollout-triton.yaml")
    rollout = next(doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc)
    (image,) = [c["image"] for c in rollout["spec"]["template"]["spec"]["containers"] if c["name"] == "triton"]
    (release,) = [name for name in matrix.data["triton"]["releases"] if matrix.triton_image(name) == image]
    return release


def summary(deployed: dict[str, str], lab_release: str) -> str:
    running = sorted(env for env, release in deployed.items() if release == lab_release)
    where = ", ".join(running) if running else "no environment"
    return f"The serving lab's tritonserver is release {lab_release}, which {where} deploys"


def triton_row(page: str, env: str) -> str:
    """The Triton row of the environment's section of docs/versions.md."""
    heading = f"\n## {env}\n"
    assert heading in page, f"{VERSIONS_PAGE} has no section for {env}: run `make docs`"
    section = page.split(heading, 1)[1].split("\n## ", 1)[0]
    (row,) = [line for line in section.splitlines() if line.startswith("| Triton |")]
    return row


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_lab_release_is_in_the_matrix_catalogue_with_its_own_perf_analyzer() -> None:
    """What the matrix itself checks: a release it knows, not one that an environment deploys."""
    matrix = load()
    lab = matrix.serving_lab
    assert lab["triton"]["release"] in matrix.data["triton"]["releases"]
    assert (
        matrix.data["triton"]["releases"][lab["triton"]["release"]]["server_version"] == lab["triton"]["server_version"]
    )
    assert lab["python_packages"]["tritonclient"] == lab["triton"]["server_version"]


@pytest.mark.parametrize("env", ENVS)
def test_the_rendered_rollout_runs_the_release_the_stack_config_names(env: str, deployed: dict[str, str]) -> None:
    assert rendered_release(env) == deployed[env]


@pytest.mark.parametrize("env", ENVS)
def test_the_versions_page_lists_each_environments_release_and_whether_the_lab_runs_it(
    env: str, deployed: dict[str, str]
) -> None:
    lab_release = load().serving_lab["triton"]["release"]
    row = triton_row((ROOT / VERSIONS_PAGE).read_text(encoding="utf-8"), env)
    verdict = (
        "run by the serving lab"
        if deployed[env] == lab_release
        else f"not run by any lab (the serving lab runs {lab_release},"
    )
    assert row.startswith(f"| Triton | {deployed[env]}: "), (
        f"{VERSIONS_PAGE} should give {env} Triton {deployed[env]}: {row}"
    )
    assert f" | {verdict}" in row, f"{VERSIONS_PAGE} should say of {env}'s Triton: {verdict}"


@pytest.mark.parametrize("doc", SUMMARY_DOCS)
def test_the_docs_say_which_environments_deploy_the_lab_release(doc: str, deployed: dict[str, str]) -> None:
    sentence = summary(deployed, load().serving_lab["triton"]["release"])
    assert sentence in flat((ROOT / doc).read_text(encoding="utf-8")), f"{doc} should say: {sentence}"


@pytest.mark.parametrize("doc", CLAIM_DOCS)
def test_no_doc_claims_the_lab_runs_a_deployed_release_unless_one_does(doc: str, deployed: dict[str, str]) -> None:
    lab_release = load().serving_lab["triton"]["release"]
    claims = [match.group(0) for match in CLAIM.finditer(flat((ROOT / doc).read_text(encoding="utf-8")))]
    assert not claims or lab_release in deployed.values(), (
        f"{doc} says {claims}, but the lab runs {lab_release}, which no environment deploys ({deployed})"
    )


@pytest.mark.parametrize(
    ("keys", "value", "key", "reason"),
    [
        (("serving_lab",), KeyError, "", "'serving_lab' is a required property"),
        (("serving_lab", "triton", "wheel_version"), 0.7, "serving_lab.triton.wheel_version", "not of type"),
        (("serving_lab", "triton", "release"), "24.1", "serving_lab.triton.release", "does not match"),
        (("serving_lab", "triton", "wheel"), KeyError, "serving_lab.triton", "'wheel' is a required property"),
        (("serving_lab", "triton", "port"), 8000, "serving_lab.triton", "Additional properties are not allowed"),
        (("serving_lab", "python_packages", "numpy"), "<2", "serving_lab.python_packages.numpy", "does not match"),
        (
            ("serving_lab", "python_packages", "onnxruntime"),
            KeyError,
            "serving_lab.python_packages",
            "'onnxruntime' is a required property",
        ),
        (("serving_lab", "debian_packages", "prometheus"), "2.42.0", "serving_lab.debian_packages.prometheus", "match"),
        (("serving_lab", "triton", "release"), "22.01", "serving_lab.triton.release", "is not one of triton.releases"),
        (
            ("serving_lab", "python_packages", "tritonclient"),
            "2.73.0",
            "serving_lab.python_packages.tritonclient",
            "is not the server version 2.51.0",
        ),
        (
            ("serving_lab", "python_packages", "nvidia-cuda-runtime-cu12"),
            "12.9.79",
            "serving_lab.python_packages.nvidia-cuda-runtime-cu12",
            "is not the CUDA 12.6.2 of release 24.10",
        ),
    ],
)
def test_a_malformed_serving_lab_section_names_the_key(
    keys: tuple[str, ...], value: object, key: str, reason: str
) -> None:
    with pytest.raises(MatrixError) as caught:
        parse(mutate(".".join(keys), value), "matrix.yml")
    assert (caught.value.path, caught.value.key) == ("matrix.yml", key)
    assert reason in caught.value.reason


def test_the_cli_prints_the_venv_requirements(capsys: pytest.CaptureFixture[str]) -> None:
    lab = load().serving_lab
    assert cli(["serving-lab-requirements"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{name}=={version}" for name, version in lab["python_packages"].items()]
    assert cli(["serving-lab-requirements", "--no-deps"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{lab['triton']['wheel']}=={lab['triton']['wheel_version']}"]


def test_the_cli_reports_a_malformed_matrix_instead_of_printing(tmp_path, capsys) -> None:
    data = raw()
    del data["serving_lab"]["python_packages"]
    bad = tmp_path / "matrix.yml"
    bad.write_text(yaml.safe_dump(data))
    assert cli(["serving-lab-requirements", "--file", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "serving_lab: 'python_packages' is a required property" in captured.err
