"""scripts/lab: up [--nodes N] | status | ssh NODE [CMD...] | poweroff NODE | down | destroy."""

from __future__ import annotations

import argparse
import json
import os
import sys

from lab_fleet.image import ImageError
from lab_fleet.lab import Lab
from lab_fleet.vm import LabError


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/lab", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="build or reuse the image, boot the nodes, write the inventory")
    up.add_argument("--nodes", type=int, default=1)
    up.add_argument("--memory", type=int, default=int(os.environ.get("LAB_MEMORY_MB", "1536")), help="MiB per node")
    up.add_argument("--cpus", type=int, default=int(os.environ.get("LAB_CPUS", "2")))
    up.add_argument("--timeout", type=float, default=300, help="seconds to wait for SSH")
    status = commands.add_parser("status", help="which nodes run, and their SSH ports")
    status.add_argument("--json", action="store_true")
    ssh = commands.add_parser("ssh", help="open a shell, or run a command, on a node")
    ssh.add_argument("node")
    ssh.add_argument("remote", nargs=argparse.REMAINDER)
    poweroff = commands.add_parser("poweroff", help="cut a node's power (fault tests)")
    poweroff.add_argument("node")
    down = commands.add_parser("down", help="stop every node (ACPI power-down, then kill); disks are kept")
    down.add_argument("--force", action="store_true", help="pull the plug instead of a clean power-down")
    destroy = commands.add_parser("destroy", help="stop and delete the nodes, their disks and the inventory")
    destroy.add_argument("--image", action="store_true", help="also delete the cached VM image")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    lab = Lab.from_environment()
    try:
        if args.command == "up":
            timings = lab.up(args.nodes, args.memory, args.cpus, args.timeout)
            print(json.dumps(timings))
        elif args.command == "status":
            rows = lab.status()
            if args.json:
                print(json.dumps(rows))
            elif not rows:
                print("no lab nodes")
            for row in [] if args.json else rows:
                state = f"running (pid {row['pid']})" if row["running"] else "stopped"
                print(f"{row['node']:<14} {state:<22} ssh 127.0.0.1:{row['ssh_port']}")
        elif args.command == "ssh":
            command = lab.ssh_command(args.node, args.remote)
            if sys.stdin.isatty() and not args.remote:
                command.insert(1, "-t")
            os.execvp(command[0], command)
        elif args.command == "poweroff":
            lab.poweroff(args.node)
        elif args.command == "down":
            lab.down(force=args.force)
        elif args.command == "destroy":
            lab.destroy(drop_image=args.image)
    except (LabError, ImageError) as exc:
        print(f"lab: error: {exc}", file=sys.stderr)
        return 1
    return 0
