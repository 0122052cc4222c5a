"""make bench-lab: cold start (empty cache: image build, KVM probe, boot) against warm start.

The cold start uses a temporary cache, so the shared image cache stays as it is.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lab_fleet.lab import Lab


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="bench-lab-"))
    lab = Lab(state_dir=root / "state", cache_dir=root / "cache", inventory=root / "hosts.yml")
    try:
        started = time.monotonic()
        cold = lab.up(count=1, memory_mb=1536, cpus=2, timeout=600)
        cold_total = time.monotonic() - started
        lab.down(force=True)
        started = time.monotonic()
        warm = lab.up(count=1, memory_mb=1536, cpus=2, timeout=600)
        warm_total = time.monotonic() - started
        lab.down(force=True)
    finally:
        lab.destroy(drop_image=True)
        shutil.rmtree(root, ignore_errors=True)
    print(f"cold start (build image + boot to SSH): {cold_total:6.1f} s  (image build {cold['image_build_s']:.1f} s)")
    print(f"warm start (cached image, boot to SSH): {warm_total:6.1f} s  (boot {warm['boot_to_ssh_s']:.1f} s)")
    print(f"warm/cold ratio: {warm_total / cold_total:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
