"""The apt hook that refuses a kernel without its headers (roles/nvidia_driver/templates/nvidia-kernel-guard.j2).

The rendered script runs here as apt runs it: the .deb paths of one apt run on stdin. The
packages are real .deb files built with dpkg-deb (only their control fields matter to the
hook); the headers this machine has installed are read from its real dpkg database. The
lab test (tests/lab/test_kernel_safety.py) proves the refusal through apt on a real node.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import jinja2
import pytest

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "roles/nvidia_driver/templates/nvidia-kernel-guard.j2"
RELEASE = "6.1.0-99-amd64"  # no such kernel exists, so its headers are installed nowhere


@pytest.fixture(scope="module")
def guard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    script = tmp_path_factory.mktemp("guard") / "nvidia-kernel-guard"
    text = jinja2.Template(TEMPLATE.read_text(), undefined=jinja2.StrictUndefined).render(
        ansible_managed="test", nvidia_driver_kernel_flavour="cloud-amd64", inventory_hostname="node-1"
    )
    script.write_text(text)
    script.chmod(0o755)
    return script


def _deb(directory: Path, package: str) -> Path:
    root = directory / package
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN/control").write_text(
        f"Package: {package}\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: t\n"
    )
    deb = directory / f"{package}_1.0_all.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root), str(deb)], check=True, capture_output=True)
    return deb


def _run(guard: Path, debs: list[Path]) -> subprocess.CompletedProcess[str]:
    stdin = "".join(f"{deb}\n" for deb in debs)
    return subprocess.run([str(guard)], input=stdin, capture_output=True, text=True, check=False)


def test_a_kernel_alone_is_refused_naming_its_headers(guard: Path, tmp_path: Path) -> None:
    result = _run(guard, [_deb(tmp_path, f"linux-image-{RELEASE}"), _deb(tmp_path, "curl")])
    assert result.returncode == 1
    assert f"refusing kernel {RELEASE}: linux-headers-{RELEASE} is neither installed nor in this run" in result.stderr
    assert "linux-image-cloud-amd64 linux-headers-cloud-amd64" in result.stderr


def test_a_kernel_with_its_headers_in_the_same_run_passes(guard: Path, tmp_path: Path) -> None:
    debs = [_deb(tmp_path, f"linux-image-{RELEASE}-unsigned"), _deb(tmp_path, f"linux-headers-{RELEASE}")]
    assert _run(guard, debs).returncode == 0


def test_runs_without_a_kernel_and_debug_images_pass(guard: Path, tmp_path: Path) -> None:
    assert _run(guard, [_deb(tmp_path, "curl"), _deb(tmp_path, f"linux-image-{RELEASE}-dbg")]).returncode == 0
    assert _run(guard, []).returncode == 0
