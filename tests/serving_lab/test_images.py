"""The gateway and drift images (serving/images/, `make image-gateway`, `make image-drift`) built with
podman from the Debian base and run on the host's loopback: the gateway against the lab's real
tritonserver (ready, the same answer as Triton direct), the drift agent against the gateway
container. The base comes from the cache when it is there (a cold debootstrap adds about 80 s)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import numpy as np
import pytest

from lab_fleet.serving import ServingLab
from model_repo_check.tritonserver.processes import LOOPBACK, ServerError, free_port, wait_ready
from model_repo_check.tritonserver.server import REPO
from platform_matrix import load
from serving.images.__main__ import cache_dir
from serving.images.apps import APPS
from serving.images.base import ensure_base
from serving.images.build import Built, build
from serving.images.container import Container
from serving.images.podman import podman
from tests.serving_lab.clients import infer

pytestmark = pytest.mark.serving_lab

LABELS = (REPO / "model_repository/text-classifier/labels.txt").read_text().split()


def _built(app: str) -> Iterator[Built]:
    """The app's image on the base (cached or built); removed afterwards unless it was there before."""
    matrix = load()
    base, _ = ensure_base(matrix.data["container_base"], cache_dir(), matrix.path)
    built = build(APPS[app], base)
    try:
        yield built
    finally:
        if not built.existed:
            podman("rmi", "--force", built.tag)


@pytest.fixture(scope="module")
def gateway_image() -> Iterator[Built]:
    yield from _built("gateway")


@pytest.fixture(scope="module")
def drift_image() -> Iterator[Built]:
    yield from _built("drift")


@contextmanager
def _serve(tag: str, env: dict[str, str], url: str) -> Iterator[str]:
    """The image running on the host network until the block ends; `url` answers /readyz 200."""
    with Container(tag, env) as container:
        try:
            wait_ready(f"{url}/readyz", 60, f"container {container.name} ({tag})")
        except ServerError as err:
            raise AssertionError(f"{err}\ncontainer log:\n{container.logs()}") from err
        yield url


@pytest.fixture(scope="module")
def gateway_container(serving_lab: ServingLab, gateway_image: Built) -> Iterator[str]:
    """The image on the host network, listening on a free loopback port; yields its URL."""
    port = free_port()
    env = {"GATEWAY_TRITON_GRPC": serving_lab.triton.grpc_url, "GATEWAY_HOST": LOOPBACK, "GATEWAY_PORT": str(port)}
    with _serve(gateway_image.tag, env, f"http://{LOOPBACK}:{port}") as url:
        yield url


def test_the_image_runs_the_app_as_a_non_root_user_with_its_port_and_revision(gateway_image: Built) -> None:
    config = json.loads(podman("inspect", "--format={{json .Config}}", gateway_image.tag))
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["/opt/venv/bin/python", "-m", "serving.gateway"]
    assert list(config["ExposedPorts"]) == ["8000/tcp"]
    revision = config["Labels"]["org.opencontainers.image.revision"]
    assert revision == gateway_image.revision
    # The commit the build read (others may have committed since): one of HEAD's history.
    ancestor = ["git", "-C", str(REPO), "merge-base", "--is-ancestor", revision.removesuffix("-dirty"), "HEAD"]
    assert subprocess.run(ancestor, check=False).returncode == 0, revision
    whoami = podman("run", "--rm", "--entrypoint=/usr/bin/id", gateway_image.tag, "-u")
    assert whoami.strip() == "10001"


def test_the_gateway_container_answers_like_triton_direct(serving_lab: ServingLab, gateway_container: str) -> None:
    embedding = np.random.default_rng(16).standard_normal(32).astype(np.float32)
    with httpx.Client(base_url=gateway_container, timeout=10) as client:
        assert client.get("/readyz").status_code == 200
        response = client.post("/v1/text-classifier", json={"embedding": embedding.tolist()})
    assert response.status_code == 200, response.text
    direct = infer(serving_lab.triton, "text-classifier", {"embedding": embedding[np.newaxis]})
    answer = response.json()
    assert np.array_equal(np.asarray(answer["logits"], np.float32), direct.as_numpy("logits")[0])
    assert np.array_equal(
        np.asarray(list(answer["probabilities"].values()), np.float32), direct.as_numpy("probabilities")[0]
    )
    assert answer["label"] == LABELS[int(np.argmax(direct.as_numpy("probabilities")[0]))]


def test_the_drift_image_pulls_the_gateway_containers_samples(gateway_container: str, drift_image: Built) -> None:
    port = free_port()
    env = {"DRIFT_GATEWAY": gateway_container, "DRIFT_HOST": LOOPBACK, "DRIFT_PORT": str(port), "DRIFT_INTERVAL": "1"}
    # /readyz: the last pull of every model reached the gateway and matched the reference.
    with _serve(drift_image.tag, env, f"http://{LOOPBACK}:{port}") as url:
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
        assert re.search(r"^model_drift_\w+", metrics, re.MULTILINE), metrics[:2000]
    config = json.loads(podman("inspect", "--format={{json .Config}}", drift_image.tag))
    assert (config["User"], list(config["ExposedPorts"])) == ("10001:10001", ["8080/tcp"])
    assert config["Entrypoint"] == ["/opt/venv/bin/python", "-m", "serving.drift"]
