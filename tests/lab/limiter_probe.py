"""Runs ON the lab VM (Debian's python3, standard library only), uploaded by limiter_lab.py: it reads the
kernel's cgroup files close to the events it times, so one SSH round trip (seconds under emulation)
does not blur a measurement. Every command prints one JSON object; times are the VM's clock.

  device PATH                                   MAJ:MIN of the whole disk under PATH
  measure --device D --seconds S CGROUP...      read/write B/s from io.stat over S seconds, every io.max
                                                seen meanwhile (sampled every 0.25 s), io.pressure some avg10
  wait --cgroup CG --token T [--absent] [--touch F | --remove F] [--pressure CG] --timeout S
                                                touch/remove F, then wait until io.max of CG holds token T
                                                (or no longer holds it): {"start", "at", "some_avg10"}
  appear --cgroup CG --token T --timeout S --run SH
                                                run SH (it creates CG), then time CG's directory
                                                appearing and its io.max holding T: {"start", "seen", "limited"}
  ready --url U --exited FILE --timeout S       wait for U to answer 200, unless FILE (the agent's exit
                                                status) appears first: {"ready": seconds or null}
  get --url U                                   {"status", "body"}
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

POLL_S = 0.02


def read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def io_bytes(cgroup: str, device: str) -> tuple[int, int]:
    """(rbytes, wbytes) of `device` in the cgroup's io.stat; zeros before its first IO."""
    for line in read(f"{cgroup}/io.stat").splitlines():
        fields = line.split()
        if fields and fields[0] == device:
            values = dict(field.split("=", 1) for field in fields[1:])
            return int(values.get("rbytes", 0)), int(values.get("wbytes", 0))
    return 0, 0


def some_avg10(cgroup: str) -> float | None:
    for line in read(f"{cgroup}/io.pressure").splitlines():
        if line.startswith("some "):
            return float(dict(field.split("=", 1) for field in line.split()[1:])["avg10"])
    return None


def device(path: str) -> dict[str, str]:
    number = os.stat(path).st_dev
    dev = f"{os.major(number)}:{os.minor(number)}"
    sysfs = Path("/sys/dev/block") / dev
    if (sysfs / "partition").exists():  # io.max takes whole disks only
        dev = (sysfs.resolve().parent / "dev").read_text().strip()
    return {"device": dev}


def measure(dev: str, seconds: float, cgroups: list[str]) -> dict[str, dict[str, object]]:
    seen: dict[str, set[str]] = {cgroup: set() for cgroup in cgroups}
    before = {cgroup: io_bytes(cgroup, dev) for cgroup in cgroups}
    start = time.time()
    while time.time() - start < seconds:
        for cgroup in cgroups:
            seen[cgroup].add(read(f"{cgroup}/io.max"))
        time.sleep(0.25)
    elapsed = time.time() - start
    after = {cgroup: io_bytes(cgroup, dev) for cgroup in cgroups}
    return {
        cgroup: {
            "rbps": (after[cgroup][0] - before[cgroup][0]) / elapsed,
            "wbps": (after[cgroup][1] - before[cgroup][1]) / elapsed,
            "io_max": sorted(seen[cgroup]),
            "some_avg10": some_avg10(cgroup),
        }
        for cgroup in cgroups
    }


def holds(cgroup: str, token: str) -> bool:
    return token in read(f"{cgroup}/io.max").split()


def wait(args: argparse.Namespace) -> dict[str, object]:
    start = time.time()
    if args.touch:
        Path(args.touch).touch()
    if args.remove:
        Path(args.remove).unlink(missing_ok=True)
    while holds(args.cgroup, args.token) == args.absent:
        if time.time() - start > args.timeout:
            return {"start": start, "at": None, "io_max": read(f"{args.cgroup}/io.max")}
        time.sleep(POLL_S)
    return {"start": start, "at": time.time(), "some_avg10": some_avg10(args.pressure) if args.pressure else None}


def appear(args: argparse.Namespace) -> dict[str, object]:
    start = time.time()
    subprocess.run(["sh", "-c", args.run], check=True)
    seen = None
    while time.time() - start < args.timeout:
        if seen is None and os.path.isdir(args.cgroup):
            seen = time.time()
        if seen is not None and holds(args.cgroup, args.token):
            return {"start": start, "seen": seen, "limited": time.time()}
        time.sleep(POLL_S)
    return {"start": start, "seen": seen, "limited": None, "io_max": read(f"{args.cgroup}/io.max")}


def get(url: str) -> dict[str, object]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return {"status": response.status, "body": response.read().decode()}
    except urllib.error.HTTPError as error:
        return {"status": error.code, "body": error.read().decode(errors="replace")}
    except OSError as error:
        return {"status": None, "body": str(error)}


def ready(url: str, exited: str, timeout: float) -> dict[str, object]:
    start = time.time()
    while time.time() - start < timeout and not os.path.exists(exited):
        if get(url)["status"] == 200:
            return {"ready": time.time() - start}
        time.sleep(0.2)
    return {"ready": None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="action", required=True)
    commands.add_parser("device").add_argument("path")
    m = commands.add_parser("measure")
    m.add_argument("--device", required=True)
    m.add_argument("--seconds", type=float, required=True)
    m.add_argument("cgroups", nargs="+")
    w = commands.add_parser("wait")
    w.add_argument("--cgroup", required=True)
    w.add_argument("--token", required=True)
    w.add_argument("--absent", action="store_true")
    w.add_argument("--touch")
    w.add_argument("--remove")
    w.add_argument("--pressure")
    w.add_argument("--timeout", type=float, required=True)
    a = commands.add_parser("appear")
    a.add_argument("--cgroup", required=True)
    a.add_argument("--token", required=True)
    a.add_argument("--timeout", type=float, required=True)
    a.add_argument("--run", required=True)
    r = commands.add_parser("ready")
    r.add_argument("--url", required=True)
    r.add_argument("--exited", required=True)
    r.add_argument("--timeout", type=float, required=True)
    commands.add_parser("get").add_argument("--url", required=True)
    args = parser.parse_args()
    if args.action == "device":
        result: object = device(args.path)
    elif args.action == "measure":
        result = measure(args.device, args.seconds, args.cgroups)
    elif args.action == "wait":
        result = wait(args)
    elif args.action == "appear":
        result = appear(args)
    elif args.action == "ready":
        result = ready(args.url, args.exited, args.timeout)
    else:
        result = get(args.url)
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
