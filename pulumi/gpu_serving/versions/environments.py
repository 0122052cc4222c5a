"""One environment's versions, each beside what the labs prove of it: the driver per node OS that
preflight admits on its fleet, Triton, Kubernetes, the charts and the images, read from its stack
file (gpu_serving.config), its fleet's group_vars and the platform matrix."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

import platform_matrix
from gpu_serving.config import PULUMI_DIR, Image, StackConfig, stack_names
from gpu_serving.versions.labs import (
    Labs,
    VersionsError,
    chart_proof,
    driver_proof,
    image_proof,
    triton_proof,
)
from platform_matrix.compat import Rule, Stack, fabric_manager, fleet_branch, product_driver, triton_driver
from platform_matrix.lifecycle import KINDS
from platform_matrix.matrix import driver_branch

ROOT = PULUMI_DIR.parent
# The environments in the order a release goes through them; a stack file of another name follows.
ORDER = ("dev", "staging", "prod")
# The rules by which preflight refuses a node OS on a fleet, whatever the day (the lifecycle is shown).
NODE_RULES: tuple[Rule, ...] = (fleet_branch, triton_driver, product_driver, fabric_manager)


@dataclass(frozen=True)
class Row:
    component: str
    version: str
    source: str
    proven: str


@dataclass(frozen=True)
class Environment:
    name: str
    stack: str  # the stack file, relative to the repository
    inventory: str  # the fleet's inventory, relative to the repository
    delivery: str
    gpus: str
    triton_release: str
    refused: tuple[str, ...]  # why preflight refuses a node OS on this fleet
    rows: tuple[Row, ...]


def stack_environments() -> list[str]:
    return sorted(stack_names(), key=lambda env: (ORDER.index(env) if env in ORDER else len(ORDER), env))


def fleet_variables(path: Path) -> Mapping[str, Any]:
    """The fleet's gpu_fleet_* variables (config read the ones a stack needs; preflight reads more)."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise VersionsError(f"{path}: cannot read the fleet's variables: {exc}") from exc


def _lifecycle(matrix: platform_matrix.Matrix, branch: int, waiver: Mapping[str, Any], inventory: str) -> str:
    entry = matrix.data["nvidia_driver"]["branches"][str(branch)]
    if entry["end_of_life"] is None:
        text = f"R{branch} is a {KINDS[entry['kind']]} branch"
    elif entry["end_of_life"] == "ended":
        text = f"R{branch} is past its end of life"
    else:
        text = f"R{branch} {KINDS[entry['kind']]} branch, end of life {entry['end_of_life']}"
    if str(waiver.get("branch")) == str(branch):
        text += f", waived in {inventory} (`gpu_fleet_driver_eol_waiver`)"
    return text


def _node(matrix: platform_matrix.Matrix, cfg: StackConfig, fleet: Mapping[str, Any], family: str) -> Stack:
    return platform_matrix.pinned_stack(
        matrix,
        os_family=family,
        triton_release=cfg.triton.release,
        gpu_product=cfg.fleet.gpu_product or None,
        gpu_count=cfg.fleet.gpu_count,
        cuda_forward_compat=cfg.fleet.cuda_forward_compat,
        fleet_driver_branch=fleet.get("gpu_fleet_driver_branch"),
    )


def refusals(matrix: platform_matrix.Matrix, cfg: StackConfig, fleet: Mapping[str, Any]) -> dict[str, list[str]]:
    """{node OS family: why preflight refuses its driver on this fleet}, every family of the matrix."""
    found: dict[str, list[str]] = {}
    for family in matrix.data["operating_systems"]:
        node = _node(matrix, cfg, fleet, family)
        found[family] = [problem.message for rule in NODE_RULES for problem in rule(matrix, node)]
    return found


def driver_rows(
    matrix: platform_matrix.Matrix,
    fleet: Mapping[str, Any],
    refused: Mapping[str, list[str]],
    inventory: str,
    labs: Labs,
) -> Iterator[Row]:
    """One row per node OS whose driver preflight admits on this fleet (`refused`: refusals())."""
    for family, system in matrix.data["operating_systems"].items():
        if refused[family]:
            continue
        source_name = system["driver_source"]
        version = matrix.source_driver_version(source_name)
        source = matrix.driver_source(source_name)
        branch = driver_branch(version)
        origin = (
            f"`nvidia_driver.sources.{source_name}`, which cannot package the fleet pin {matrix.driver_version}"
            if "version" in source
            else f"the fleet pin `nvidia_driver.version`, from `{source_name}`"
        )
        lifecycle = _lifecycle(matrix, branch, fleet.get("gpu_fleet_driver_eol_waiver") or {}, inventory)
        yield Row(
            component=f"driver, {family} {', '.join(system['versions'])}",
            version=f"R{branch}: {version} (package {source['package_version']})",
            source=f"{origin}; {lifecycle}",
            proven=driver_proof(labs.vm, family, source_name, version),
        )


def _image(ref: str, digest: str | None) -> str:
    return f"`{ref}`" if digest else f"`{ref}`, no digest recorded"


def triton_row(matrix: platform_matrix.Matrix, cfg: StackConfig, stack: str, inventory: str, labs: Labs) -> Row:
    release = cfg.triton.release
    entry = matrix.triton_release(release)
    source = (
        f"`gpu_fleet_triton_release` in {inventory}"
        if release == cfg.fleet.triton_release
        else f"`gpu-serving:triton.release` in {stack}"
    )
    return Row(
        component="Triton",
        version=f"{release}: server {entry['server_version']}, CUDA {entry['cuda']}, "
        + _image(cfg.triton.image, entry["digest"]),
        source=f"{source}; `triton.releases.{release}`",
        proven=triton_proof(labs.serving, release),
    )


def kubernetes_row(matrix: platform_matrix.Matrix, cfg: StackConfig) -> Row:
    minors = ", ".join(matrix.data["kubernetes"]["supported_minors"])
    return Row(
        component="Kubernetes",
        version=cfg.kubernetes_version,
        source=f"`kubernetes.version` (add-ons known to work on {minors})",
        proven="no cluster here: the rendered manifests pass its schemas (kubernetes-validate --strict)",
    )


def chart_rows(cfg: StackConfig, labs: Labs) -> Iterator[Row]:
    for name, pin in cfg.charts.items():
        chart = "" if pin.chart == name else f" (chart `{pin.chart}`)"
        yield Row(f"chart {name}", pin.version, f"`charts.{name}`{chart}", chart_proof(labs.serving, name))


def image_rows(matrix: platform_matrix.Matrix, cfg: StackConfig, stack: str) -> Iterator[Row]:
    """The stack's images (name, stack key, pin), then the add-ons' from the matrix."""
    pinned: tuple[tuple[str, str, Image], ...] = (
        ("gateway", "gateway", cfg.gateway.image),
        ("drift-agent", "driftAgent", cfg.drift_agent.image),
    )
    for name, key, image in pinned:
        yield Row(
            f"image {name}", _image(image.ref, image.digest), f"`gpu-serving:{key}.image` in {stack}", image_proof(name)
        )
    for name, entry in matrix.data["images"].items():
        yield Row(f"image {name}", _image(matrix.image(name), entry["digest"]), f"`images.{name}`", image_proof(name))


def environment(cfg: StackConfig, matrix: platform_matrix.Matrix, labs: Labs) -> Environment:
    """The rows of the stack `cfg` (gpu_serving.config.from_stack_file)."""
    stack = f"pulumi/{cfg.source}"
    inventory = cfg.fleet.path.parents[2].relative_to(ROOT).as_posix()
    fleet = fleet_variables(cfg.fleet.path)
    gpus = f"{cfg.fleet.gpu_count} x {cfg.fleet.gpu_product} per node" if cfg.fleet.gpu_count else "no GPU"
    refused = refusals(matrix, cfg, fleet)
    reasons = tuple(
        f"{family} {', '.join(matrix.data['operating_systems'][family]['versions'])}: {'; '.join(why)}"
        for family, why in refused.items()
        if why
    )
    rows = (
        *driver_rows(matrix, fleet, refused, inventory, labs),
        triton_row(matrix, cfg, stack, inventory, labs),
        kubernetes_row(matrix, cfg),
        *chart_rows(cfg, labs),
        *image_rows(matrix, cfg, stack),
    )
    return Environment(cfg.env, stack, inventory, cfg.delivery, gpus, cfg.triton.release, reasons, rows)
