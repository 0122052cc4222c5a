"""Where Triton's pod gets its models: the published release (scripts/release_model), localized
into a volume sized from the release, with the store's credentials.

Triton downloads an `s3://` repository into TRITON_AWS_MOUNT_DIRECTORY (default /tmp, a 1 GiB
emptyDir on a read-only root here, so a larger model set got the pod evicted). With a release
the pod mounts an emptyDir `models` there whose sizeLimit is twice the release's recorded size
plus MODELS_HEADROOM_MI (a reload through the repository API downloads the model again before the
old copy goes), and requests that much ephemeral storage so the scheduler places it on a node
with the disk. The release's URI and digest are in the pod template, so a new release is a new
revision, which the Rollout canaries (serving/release/README.md).
"""

from __future__ import annotations

from typing import Any

from gpu_serving.config import Triton

MOUNT = "/models"
RELEASE_ANNOTATION = "gpu-serving.example.com/model-release"
MODELS_HEADROOM_MI = 256
MI = 1 << 20


def repository(triton: Triton) -> str:
    """Triton's --model-repository: the release's URI, or the stack's modelRepository before the first release."""
    return triton.model_release.uri if triton.model_release else triton.model_repository


def size_limit(triton: Triton) -> str | None:
    if triton.model_release is None:
        return None
    return f"{-(-2 * triton.model_release.size_bytes // MI) + MODELS_HEADROOM_MI}Mi"


def annotations(triton: Triton) -> dict[str, str]:
    return {RELEASE_ANNOTATION: triton.model_release.digest} if triton.model_release else {}


def storage_requests(triton: Triton) -> dict[str, str]:
    limit = size_limit(triton)
    return {"ephemeral-storage": limit} if limit else {}


def container(triton: Triton) -> dict[str, Any]:
    """env, envFrom and volumeMounts for Triton's container (each only when it has entries)."""
    fields: dict[str, Any] = {}
    if triton.model_release:
        fields["env"] = [{"name": "TRITON_AWS_MOUNT_DIRECTORY", "value": MOUNT}]
        fields["volumeMounts"] = [{"name": "models", "mountPath": MOUNT}]
    if triton.model_store_secret:
        # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_DEFAULT_REGION: the variables Triton's S3 client reads.
        fields["envFrom"] = [{"secretRef": {"name": triton.model_store_secret}}]
    return fields


def volumes(triton: Triton) -> list[dict[str, Any]]:
    limit = size_limit(triton)
    return [{"name": "models", "emptyDir": {"sizeLimit": limit}}] if limit else []


def waivers(triton: Triton) -> tuple[tuple[str, str], ...]:
    if not triton.model_store_secret:
        return ()
    return (("CKV_K8S_35", "Triton's S3 client reads its key from AWS_* variables, not from a file"),)
