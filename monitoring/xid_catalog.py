"""NVIDIA's XID catalogue as the GPU alerts read it: each XID under the immediate action that the
catalogue's "Resolution Bucket (Immediate Action)" column gives it.

Source: "Analyzing Xid Errors with the Xid Catalog",
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (Ampere and newer: A100,
H100, B100, GB200), cross-read with NVIDIA's machine-readable copy of the same buckets in
NVSentinel (distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv).

Which actions page and which make a ticket is this project's reading of them:
- the GPU is out of service until it is reset or the machine restarted (RESET_GPU, RESTART_BM,
  RESTART_VM, and the workflows of XID 48 and the NVLink XIDs, which start with a reset): page;
- the application's CUDA context died, the GPU itself is fine (RESTART_APP, the workflow of XID
  45): a ticket, as the pod's own restart recovers it;
- IGNORE: no alert (the dashboard still counts every occurrence);
- every other XID, the catalogue's CONTACT_SUPPORT ("Unused" XIDs that should never appear),
  CHECK_MECHANICALS, UPDATE_SWFW, CHECK_UVM, and any XID newer than this table: a ticket.
"""

from __future__ import annotations

from collections.abc import Iterable


def _xids(*spans: int | tuple[int, int]) -> tuple[int, ...]:
    """XIDs from single numbers and inclusive (first, last) ranges."""
    found: list[int] = []
    for span in spans:
        first, last = span if isinstance(span, tuple) else (span, span)
        found += range(first, last + 1)
    return tuple(found)


# Immediate action -> the XIDs the catalogue gives it.
OUT_OF_SERVICE: dict[str, tuple[int, ...]] = {
    "RESET_GPU": _xids(46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158, 162),
    "RESTART_BM": _xids(79, 160),
    "RESTART_VM": _xids(151),
    "WORKFLOW_XID_48": _xids(48),
    "WORKFLOW_NVLINK_ERR": _xids(74),
    "WORKFLOW_NVLINK5_ERR": _xids((144, 150)),
}
APPLICATION: dict[str, tuple[int, ...]] = {
    "RESTART_APP": _xids(
        8,
        11,
        13,
        25,
        31,
        32,
        (39, 41),
        60,
        68,
        69,
        (70, 72),
        (75, 77),
        80,
        (82, 86),
        88,
        89,
        94,
        (96, 105),
        (126, 135),
        139,
    ),
    "WORKFLOW_XID_45": _xids(45),
}
IGNORE = _xids(14, 37, 38, 43, 44, 63, 66, 67, 92, 93, 106, 107, 121, 137, 141, 152, 153, 154, 157, 161)


def matcher(xids: Iterable[int]) -> str:
    """A PromQL regex alternative of the XIDs, for the exporter's `xid` label."""
    return "|".join(str(xid) for xid in sorted(xids))


def known() -> tuple[int, ...]:
    """Every XID that has an action of its own above (the rest is a ticket of unexpected XIDs)."""
    buckets = [*OUT_OF_SERVICE.values(), *APPLICATION.values(), IGNORE]
    return tuple(sorted(xid for bucket in buckets for xid in bucket))
