"""make bench-converge: site.yml on a fresh lab node, then its no-op re-runs, in one session.

The no-op re-run is timed under three settings, interleaved round by round so that a busy
moment of the machine does not land on one setting only:
- project: the repository's ansible.cfg (Mitogen, pipelining, ControlPersist, fact cache,
  minimal fact subset);
- project, linear: the same file with ANSIBLE_STRATEGY=linear, i.e. without Mitogen, which
  shows what the ssh and fact settings alone buy;
- stock: only roles_path and filter_plugins set, which Ansible needs to find this
  repository's roles and filters.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lab_fleet.ansible_env import ansible_env  # noqa: E402
from lab_fleet.lab import Lab  # noqa: E402

TARGET = 0.5
PROJECT, LINEAR, STOCK = "project (ansible.cfg)", "project, ANSIBLE_STRATEGY=linear", "stock"


def timed_run(inventory: Path, env: dict[str, str], noop: bool = True) -> float:
    started = time.monotonic()
    result = subprocess.run(
        ["ansible-playbook", "-i", str(inventory.parent), "playbooks/site.yml"],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"site.yml failed:\n{result.stdout[-3000:]}")
    if noop and "changed=0 " not in result.stdout:
        raise SystemExit(f"a re-run changed the node, so it is no no-op:\n{result.stdout[-3000:]}")
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="no-op re-runs per setting (default 3)")
    parser.add_argument(
        "--inventory",
        type=Path,
        help="hosts.yml of a running, converged lab node (scripts/lab up + site.yml): time only the no-op re-runs",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")

    root = Path(tempfile.mkdtemp(prefix="bench-converge-"))
    inventory = args.inventory.resolve() if args.inventory else root / "inventory/hosts.yml"
    if not args.inventory:
        (root / "inventory").mkdir()
        (root / "inventory/group_vars").symlink_to(REPO / "inventories/lab/group_vars")
    stock_config = root / "stock.cfg"
    stock_config.write_text(f"[defaults]\nroles_path = {REPO / 'roles'}\nfilter_plugins = {REPO / 'plugins/filter'}\n")
    settings = {
        PROJECT: ansible_env(root / "facts"),
        LINEAR: ansible_env(root / "facts", ANSIBLE_STRATEGY="linear"),
        STOCK: ansible_env(root / "facts-stock", config=stock_config),
    }
    lab = Lab(state_dir=root / "state", cache_dir=Lab.from_environment().cache_dir, inventory=inventory)
    noop_times: dict[str, list[float]] = {name: [] for name in settings}
    first = None
    try:
        if not args.inventory:
            lab.up(count=1, memory_mb=1536, cpus=2, timeout=600)
            first = timed_run(inventory, settings[PROJECT], noop=False)
        for _ in range(args.rounds):
            for name, env in settings.items():
                noop_times[name].append(timed_run(inventory, env))
    finally:
        if not args.inventory:
            lab.destroy(drop_image=False)

    median = {name: statistics.median(times) for name, times in noop_times.items()}
    if first is not None:
        print(f"first run (fresh node, project settings): {first:7.1f} s")
    print(f"no-op re-run, median of {args.rounds} (each run in seconds):")
    for name, times in noop_times.items():
        print(f"  {name:34s}: {median[name]:7.1f} s  ({', '.join(f'{t:.1f}' for t in times)})")
    ratio = median[PROJECT] / median[STOCK]
    linear = median[LINEAR] / median[STOCK]
    verdict = "met" if ratio <= TARGET else "NOT met"
    print(f"project/stock no-op ratio          : {ratio:.2f} (target <= {TARGET:.2f}: {verdict})")
    print(f"project without Mitogen/stock ratio: {linear:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
