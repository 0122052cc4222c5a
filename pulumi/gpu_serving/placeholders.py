"""The values that belong to one site, which a new environment must not copy from another.

scripts/new-environment writes a marker (gpu_serving.markers) in place of each of these that
the copied stack has, and one per host group in the inventory's hosts.yml; everything else of
the copied environment (sizes, the canary, the fleet's facts, image tags) stays as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_serving.config import IMAGE_PATHS, IRSA_ANNOTATION


@dataclass(frozen=True)
class Placeholder:
    path: tuple[str, ...]  # the key in the stack config, without `gpu-serving:`
    what: str  # what to fill in, for the person who fills it

    @property
    def key(self) -> str:
        return ".".join(self.path)


# Written where the copied stack has the key; kubernetes.context and .cluster every stack has.
STACK = (
    Placeholder(("kubernetes", "context"), "the kubeconfig context of this environment's cluster"),
    Placeholder(("kubernetes", "cluster"), "the name of the cluster that context points at"),
    Placeholder(
        ("kubernetes", "kubeconfig"),
        "the kubeconfig file with that context, or remove the key for KUBECONFIG or ~/.kube/config",
    ),
    Placeholder(("gitRepoURL",), "the clone URL of your copy of this repository, which Argo CD syncs"),
    Placeholder(("triton", "modelRepository"), "the model store Triton reads: s3://bucket/prefix, gs:// or as://"),
    Placeholder(
        ("triton", "serviceAccountAnnotations", IRSA_ANNOTATION),
        "the ARN of the IAM role that Triton's pods assume to read the model store (IRSA)",
    ),
    *(
        Placeholder((component, "image", "repository"), f"your registry's repository of this image: REGISTRY/{path}")
        for component, path in IMAGE_PATHS.items()
    ),
    Placeholder(("monitoring", "runbookURL"), "where people browse monitoring/runbook.md of your copy"),
)

HOSTS_FILE = "hosts.yml"


def hosts_what(group: str) -> str:
    """What the hosts of an inventory group are, for its placeholder in hosts.yml."""
    return f"the hosts of group {group}: a mapping with a key per host name (or range, node-[01:04].example.net)"
