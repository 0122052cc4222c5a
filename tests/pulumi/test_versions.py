"""docs/versions.md (gpu_serving.versions, `make docs`): the committed page is a fresh generation,
and its statements of what the labs prove follow from the data: the lab's Triton from the wheel its
lock pins, a stack on that release marked as run by the serving lab, the VM lab's driver marked
as installed there and no other."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from gpu_serving.config import from_stack_file, stack_file
from gpu_serving.versions.__main__ import main
from gpu_serving.versions.environments import Environment, Row, environment
from gpu_serving.versions.labs import SERVING_LAB_LOCK, VersionsError, labs, serving_lab

import platform_matrix

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "versions.md"


def row(env: Environment, component: str) -> Row:
    (found,) = [r for r in env.rows if r.component == component]
    return found


def restacked(tmp_path: Path, env: str, release: str) -> Path:
    """A copy of the stack file of `env` that pins Triton `release` (the fleet's stays as it is)."""
    document = yaml.safe_load(stack_file(env).read_text(encoding="utf-8"))
    document["config"]["gpu-serving:triton"]["release"] = release
    path = tmp_path / f"Pulumi.{env}.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def test_the_committed_page_is_a_fresh_generation(tmp_path: Path) -> None:
    fresh = tmp_path / "versions.md"
    assert main(["--out", str(fresh)]) == 0
    assert PAGE.is_file(), "docs/versions.md is missing: run `make docs` and commit it"
    assert PAGE.read_text(encoding="utf-8") == fresh.read_text(encoding="utf-8"), (
        "docs/versions.md differs from a fresh generation: run `make docs` and commit it"
    )


def test_the_labs_triton_is_the_server_of_the_wheel_the_lock_pins() -> None:
    matrix = platform_matrix.load()
    lab = serving_lab(matrix, ROOT)
    releases = matrix.data["triton"]["releases"]
    assert f"{lab.wheel}=={lab.wheel_version}" in (ROOT / SERVING_LAB_LOCK).read_text(encoding="utf-8")
    assert releases[lab.release]["server_version"] == lab.server_version


@pytest.mark.parametrize(
    ("lock", "reason"),
    [
        ("nvidia_pytriton==0.7.1 \\\n    --hash=sha256:00\n", "pins nvidia-pytriton 0.7.1, but serving_lab.triton"),
        ("numpy==1.26.4\n", "pins no nvidia-pytriton"),
    ],
)
def test_a_lock_that_disagrees_with_the_matrix_stops_the_page(tmp_path: Path, lock: str, reason: str) -> None:
    (tmp_path / SERVING_LAB_LOCK).write_text(lock, encoding="utf-8")
    with pytest.raises(VersionsError) as caught:
        serving_lab(platform_matrix.load(), tmp_path)
    assert str(caught.value).startswith(SERVING_LAB_LOCK)
    assert reason in str(caught.value)


def test_a_stack_on_the_labs_release_is_marked_as_run_by_the_serving_lab(tmp_path: Path) -> None:
    matrix = platform_matrix.load()
    found = labs(matrix, ROOT)
    lab_release = found.serving.release
    env = environment(from_stack_file("dev", restacked(tmp_path, "dev", lab_release)), matrix, found)
    triton = row(env, "Triton")
    assert triton.version.startswith(f"{lab_release}: server {found.serving.server_version},")
    assert triton.source.startswith("`gpu-serving:triton.release` in pulumi/Pulumi.dev.yaml")
    assert triton.proven.startswith(f"run by the serving lab: tritonserver {found.serving.server_version} ")
    other = environment(from_stack_file("dev"), matrix, found)
    assert other.triton_release != lab_release
    assert row(other, "Triton").proven.startswith(f"not run by any lab (the serving lab runs {lab_release},")


def test_a_release_that_the_lab_driver_cannot_run_drops_the_lab_os_and_says_why(tmp_path: Path) -> None:
    """On the lab's fleet, 24.10 needs R560: Debian's R535 is refused by preflight's own rule."""
    matrix = platform_matrix.load()
    found = labs(matrix, ROOT)
    env = environment(from_stack_file("dev", restacked(tmp_path, "dev", "24.10")), matrix, found)
    components = [r.component for r in env.rows]
    assert not any(c.startswith(f"driver, {found.vm.os_family} ") for c in components)
    assert [why.split(":")[0] for why in env.refused] == [f"{found.vm.os_family} 12"]
    assert "Triton 24.10 (CUDA 12.6.2) needs driver R560 or later" in env.refused[0]


def test_only_the_vm_labs_driver_is_marked_as_installed_there() -> None:
    matrix = platform_matrix.load()
    found = labs(matrix, ROOT)
    dev, prod = (environment(from_stack_file(env), matrix, found) for env in ("dev", "prod"))
    drivers = {r.component: r for r in dev.rows if r.component.startswith("driver, ")}
    lab_row = drivers.pop(f"driver, {found.vm.os_family} 12")
    assert lab_row.version.startswith(f"R535: {found.vm.driver_version} ")
    assert lab_row.proven.startswith("installed by the VM lab")
    assert "waived in inventories/lab" in lab_row.source
    assert drivers and all(
        r.proven.startswith("never ran: NVIDIA's repositories are unreachable") for r in drivers.values()
    )
    pin = matrix.driver_version
    assert all(r.version.startswith(f"R580: {pin} ") for r in prod.rows if r.component.startswith("driver, "))
    assert prod.refused and prod.refused[0].startswith(f"{found.vm.os_family} 12: the fleet runs R580")


def test_every_chart_and_image_of_the_stack_has_a_row() -> None:
    matrix = platform_matrix.load()
    cfg = from_stack_file("staging")
    env = environment(cfg, matrix, labs(matrix, ROOT))
    versions = {r.component: r.version for r in env.rows}
    assert {f"chart {name}": pin.version for name, pin in cfg.charts.items()}.items() <= versions.items()
    assert f"`{cfg.gateway.image.ref}`" in versions["image gateway"]
    assert f"`{cfg.drift_agent.image.ref}`" in versions["image drift-agent"]
    for name in matrix.data["images"]:
        assert f"`{matrix.image(name)}`" in versions[f"image {name}"]
    assert f"`{cfg.triton.image}`" in versions["Triton"]
