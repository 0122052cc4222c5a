"""Rules from how the repository is deployed: Kubernetes names, GPU scheduling, version policy."""

from __future__ import annotations

import re

from tritonclient.grpc import model_config_pb2

from model_repo_check.findings import Report
from model_repo_check.layout import ModelDir

Kind = model_config_pb2.ModelInstanceGroup.Kind
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_LABEL_MAX = 63


def service_name(model_name: str) -> str:
    """The Kubernetes Service name a model gets: underscores become hyphens."""
    return model_name.replace("_", "-")


def check_name(model: ModelDir, report: Report) -> None:
    name = model.config.name or model.path.name
    at = model.where.find("name")
    if len(name) > DNS_LABEL_MAX or not DNS_LABEL.match(service_name(name)):
        report.error(
            "dns-name",
            f"model name '{name}' cannot name a Kubernetes Service: use at most {DNS_LABEL_MAX} characters "
            "from a-z, 0-9 and '-', starting and ending with a letter or digit",
            at,
        )
    elif "_" in name:
        report.warning(
            "dns-underscore",
            f"model name '{name}' has underscores, which a DNS label cannot carry; its Service becomes "
            f"'{service_name(name)}', so the names differ — prefer '{service_name(name)}' for both",
            at,
        )


def check_service_collisions(models: list[ModelDir], report: Report) -> None:
    seen: dict[str, str] = {}
    for model in models:
        name = model.config.name or model.path.name
        service = service_name(name)
        if service in seen and seen[service] != name:
            report.error(
                "service-collision",
                f"models '{seen[service]}' and '{name}' would both get the Service '{service}'",
                model.where.find("name"),
            )
        seen.setdefault(service, name)


def check_gpus(model: ModelDir, gpus: int | None, report: Report) -> None:
    """KIND_GPU only where the environment gives the pod GPUs (gpus None: unknown, assume it does)."""
    if gpus is None:
        return
    for i, group in enumerate(model.config.instance_group):
        if group.kind != Kind.KIND_GPU:
            continue
        if gpus == 0:
            report.error(
                "gpu-unavailable",
                f"instance_group {i} is KIND_GPU but the target environment schedules no GPUs for Triton "
                "(use KIND_CPU, or KIND_AUTO to take a GPU where there is one)",
                model.where.find("instance_group", i, "kind"),
            )
        elif missing := [g for g in group.gpus if g >= gpus]:
            report.error(
                "gpu-unavailable",
                f"instance_group {i} asks for GPU {missing} but a Triton pod has {gpus} GPU(s) (0..{gpus - 1})",
                model.where.find("instance_group", i, "gpus"),
            )


def check_version_policy(model: ModelDir, report: Report) -> None:
    policy = model.config.version_policy
    choice = policy.WhichOneof("policy_choice")
    present = sorted(model.versions)
    if choice == "specific":
        at = model.where.find("version_policy", "specific", "versions")
        if not policy.specific.versions:
            report.error("version-policy", "version_policy specific lists no versions", at)
        for version in policy.specific.versions:
            if version not in model.versions:
                report.error(
                    "version-policy",
                    f"version_policy serves version {version}, but there is no folder {version}/ (present: {present})",
                    at,
                )
    elif choice == "latest":
        at = model.where.find("version_policy", "latest", "num_versions")
        wanted = policy.latest.num_versions
        if wanted < 1:
            report.error("version-policy", f"version_policy latest num_versions is {wanted}; it must be at least 1", at)
        elif wanted > len(present):
            report.warning(
                "version-policy",
                f"version_policy latest asks for {wanted} versions, only {len(present)} exist ({present})",
                at,
            )


def check_deployment(model: ModelDir, gpus: int | None, report: Report) -> None:
    check_name(model, report)
    check_gpus(model, gpus, report)
    check_version_policy(model, report)
