"""Rules from how the repository is served and deployed: URL-safe names, GPU scheduling, version policy.

Every model is served through the one Triton Service, so a model name never names a
Kubernetes object and need not be a DNS label (Triton serves `ImagePre` and `densenet_onnx`).
It is a path segment of Triton's HTTP API, though: see `check_name`.
"""

from __future__ import annotations

import re

from tritonclient.grpc import model_config_pb2

from model_repo_check.findings import Report
from model_repo_check.layout import ModelDir

Kind = model_config_pb2.ModelInstanceGroup.Kind
# The characters urllib.parse.quote leaves as they are, and so tritonclient's HTTP client.
URL_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.~-]+$")


def check_name(model: ModelDir, report: Report) -> None:
    """A warning, not an error: Triton 2.51 loads such a model, but its HTTP API does not
    percent-decode the model name in /v2/models/<name>/..., while tritonclient's HTTP client
    percent-encodes every other character, so its requests miss the model (gRPC reaches it).
    Measured against the real server: 'a+b' and 'a:b' loaded and were ready over gRPC; over HTTP
    /v2/models/a+b/ready answered 200, /v2/models/a%2Bb/ready (what tritonclient sends) 400.
    'ImagePre', 'densenet_onnx' and 'Image.Preprocess' loaded and answered under both."""
    name = model.config.name or model.path.name
    if not URL_SAFE_NAME.match(name):
        unsafe = "".join(sorted({c for c in name if not URL_SAFE_NAME.match(c)}))
        report.warning(
            "url-unsafe-name",
            f"model name '{name}' has characters a URL must percent-encode ({unsafe!r}); Triton does not decode "
            "them in its HTTP paths, so HTTP clients miss this model (gRPC reaches it): keep to A-Z, a-z, 0-9 "
            "and '_', '.', '-', '~'",
            model.where.find("name"),
        )


def check_gpus(model: ModelDir, gpus: int | None, report: Report) -> None:
    """KIND_GPU only where the environment gives the pod GPUs (gpus None: unknown, assume it does)."""
    if gpus is None:
        return
    for i, group in enumerate(model.config.instance_group):
        if group.kind == Kind.KIND_AUTO and (absent := [g for g in group.gpus if g >= gpus]):
            # NormalizeInstanceGroup (core r24.10): KIND_AUTO with a listed GPU that is not there becomes
            # KIND_CPU, keeping its gpus, and ValidateInstanceGroup refuses a KIND_CPU group with GPUs.
            report.error(
                "gpu-unavailable",
                f"instance_group {i} is KIND_AUTO with gpus {list(group.gpus)}, but a Triton pod has {gpus} GPU(s): "
                f"Triton makes it KIND_CPU (GPU {absent} is missing) and then refuses a KIND_CPU group that "
                "specifies GPUs",
                model.where.find("instance_group", i, "gpus"),
            )
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


def versions_to_load(model: ModelDir) -> list[int]:
    """The versions Triton loads under the model's version policy (VersionsToLoad; default: latest 1)."""
    policy = model.config.version_policy
    present = sorted(model.versions, reverse=True)
    choice = policy.WhichOneof("policy_choice")
    if choice == "specific":
        return [version for version in present if version in policy.specific.versions]
    if choice == "all":
        return present
    return present[: policy.latest.num_versions if choice == "latest" else 1]


def check_version_policy(model: ModelDir, report: Report) -> None:
    """VersionsToLoad (core r24.10 src/model_repository_manager/model_lifecycle.cc): Triton loads the
    listed versions that have a folder, and refuses the model only when that leaves none
    ("at least one version must be available under the version policy")."""
    if not model.versions:
        return  # no version folder at all is the layout's error
    policy = model.config.version_policy
    choice = policy.WhichOneof("policy_choice")
    present = sorted(model.versions)
    name = model.config.name
    if choice == "specific":
        at = model.where.find("version_policy", "specific", "versions")
        listed = list(policy.specific.versions)
        missing = [version for version in listed if version not in model.versions]
        if len(missing) == len(listed):
            report.error(
                "version-policy",
                f"at least one version must be available under the version policy of model '{name}': it serves "
                f"{listed}, the folders are {present}",
                at,
            )
        elif missing:
            report.warning(
                "version-policy",
                f"version_policy serves versions {missing} that have no folder (present: {present}); Triton loads "
                "the others and logs an error for each of these",
                at,
            )
    elif choice == "latest":
        at = model.where.find("version_policy", "latest", "num_versions")
        wanted = policy.latest.num_versions
        if wanted < 1:
            report.error(
                "version-policy",
                f"at least one version must be available under the version policy of model '{name}': "
                f"latest num_versions is {wanted}",
                at,
            )
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
