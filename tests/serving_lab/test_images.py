"""The gateway image (images/, `make image-gateway`) built with podman from the Debian base and run
against the lab's real tritonserver on the host's loopback: ready, and the same answer as Triton
direct. The base comes from the cache when it is there (a cold debootstrap adds about 80 s)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from images.__main__ import cache_dir
from images.apps import APPS
from images.base import ensure_base
from images.build import Built, build
from images.container import Container
from images.podman import podman
from lab_fleet.processes import LOOPBACK, ServerError, free_port, wait_ready
from lab_fleet.serving import ServingLab
from lab_fleet.triton import REPO
from platform_matrix import load
from tests.serving_lab.clients import infer

pytestmark = pytest.mark.serving_lab

LABELS = (REPO / "model_repository/text-classifier/labels.txt").read_text().split()


@pytest.fixture(scope="module")
def gateway_image() -> Built:
    matrix = load()
    base, _ = ensure_base(matrix.data["container_base"], cache_dir(), matrix.path)
    return build(APPS["gateway"], base)


@pytest.fixture(scope="module")
def gateway_container(serving_lab: ServingLab, gateway_image: Built) -> Iterator[str]:
    """The image on the host network, listening on a free loopback port; yields its URL."""
    port = free_port()
    env = {"GATEWAY_TRITON_GRPC": serving_lab.triton.grpc_url, "GATEWAY_HOST": LOOPBACK, "GATEWAY_PORT": str(port)}
    with Container(gateway_image.tag, env) as container:
        url = f"http://{LOOPBACK}:{port}"
        try:
            wait_ready(f"{url}/readyz", 60, f"container {container.name}")
        except ServerError as err:
            raise AssertionError(f"{err}\ncontainer log:\n{container.logs()}") from err
        yield url


def test_the_image_runs_the_app_as_a_non_root_user_with_its_port_and_revision(gateway_image: Built) -> None:
    config = json.loads(podman("inspect", "--format={{json .Config}}", gateway_image.tag))
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["/opt/venv/bin/python", "-m", "serving.gateway"]
    assert list(config["ExposedPorts"]) == ["8000/tcp"]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    assert config["Labels"]["org.opencontainers.image.revision"].removesuffix("-dirty") == head.stdout.strip()
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
