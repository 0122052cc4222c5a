"""make bench-converge: site.yml on a fresh lab node, first run and no-op re-runs, in one session.

The no-op re-run is timed twice: with the project's ansible.cfg (pipelining, ControlPersist,
fact cache, minimal fact subset) and with stock settings (only roles_path and filter_plugins
set, which Ansible needs to find this repository's roles and filters).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lab_fleet.lab import Lab  # noqa: E402


def timed_run(inventory: Path, config: Path, facts: Path) -> float:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "ANSIBLE_CONFIG": str(config),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(facts),
    }
    started = time.monotonic()
    result = subprocess.run(
        ["ansible-playbook", "-i", str(inventory.parent), "playbooks/site.yml"],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"site.yml failed:\n{result.stdout[-3000:]}")
    return time.monotonic() - started


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="bench-converge-"))
    inventory = root / "inventory/hosts.yml"
    (root / "inventory").mkdir()
    (root / "inventory/group_vars").symlink_to(REPO / "inventories/lab/group_vars")
    stock = root / "stock.cfg"
    stock.write_text(f"[defaults]\nroles_path = {REPO / 'roles'}\nfilter_plugins = {REPO / 'plugins/filter'}\n")
    lab = Lab(state_dir=root / "state", cache_dir=Lab.from_environment().cache_dir, inventory=inventory)
    project = REPO / "ansible.cfg"
    try:
        lab.up(count=1, memory_mb=1536, cpus=2, timeout=600)
        first = timed_run(inventory, project, root / "facts")
        noop_project = timed_run(inventory, project, root / "facts")
        noop_stock = timed_run(inventory, stock, root / "facts-stock")
    finally:
        lab.destroy(drop_image=False)
    print(f"first run (fresh node)        : {first:7.1f} s")
    print(f"no-op re-run, project settings: {noop_project:7.1f} s")
    print(f"no-op re-run, stock settings  : {noop_stock:7.1f} s")
    print(f"project/stock no-op ratio     : {noop_project / noop_stock:.2f} (target <= 0.50)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
