"""Operate the Triton release by hand (the Argo Rollout `triton` and a live Triton).

  status [--only rollout|triton]        the Rollout (phase, step, weights, hashes) and Triton's models
  promote [--full]                      as `kubectl argo rollouts promote [--full]`
  pause                                 as `kubectl argo rollouts pause`
  abort                                 as `kubectl argo rollouts abort`: all traffic back to stable
  rollback [--to-revision N]            as `kubectl argo rollouts undo`: an earlier template back
  scale --replicas N                    spec.replicas, or the HPA's minReplicas when an HPA scales it
  model load|unload|reload NAME [--version V]   Triton's repository API, then a readiness check

Every command takes --dry-run: it prints the exact requests that change something and sends none
of them (reads that decide the request, like the GET before a promote, are still sent).
Exit status: 0 done; 1 refused (the server answered with an error, or the readiness check after a
model action failed); 2 bad usage, no usable kubeconfig, or a server that does not answer.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from serving.runbook import rollout
from serving.runbook.api import ApiRequest
from serving.runbook.errors import RefusedError, RunbookError
from serving.runbook.kube import Kube, Patch
from serving.runbook.triton import Triton

DEFAULT_TRITON_URL = "http://127.0.0.1:8000"


def parse(argv: list[str] | None) -> argparse.Namespace:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dry-run", action="store_true", help="print the requests that would change something")
    common.add_argument("--namespace", "-n", default="triton", help="the Rollout's namespace (%(default)s)")
    common.add_argument("--rollout", default="triton", help="the Rollout's name (%(default)s)")
    common.add_argument("--kubeconfig", help="kubeconfig file ($KUBECONFIG, ~/.kube/config, else in-cluster)")
    common.add_argument("--context", help="kubeconfig context (its current one)")
    common.add_argument(
        "--triton-url",
        default=os.environ.get("TRITON_URL", DEFAULT_TRITON_URL),
        help="Triton's HTTP endpoint, e.g. a port-forward to one pod ($TRITON_URL, %(default)s)",
    )
    common.add_argument("--timeout", type=float, default=60, help="seconds for a readiness check (%(default)s)")

    parser = argparse.ArgumentParser(
        prog="scripts/runbook", description=__doc__.splitlines()[0], epilog="\n".join(__doc__.splitlines()[1:])
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", parents=[common], help="the Rollout and Triton's models")
    status.add_argument("--only", choices=["rollout", "triton"], help="show one of the two")
    promote = commands.add_parser("promote", parents=[common], help="the next step (--full: to the end)")
    promote.add_argument("--full", action="store_true", help="skip the remaining steps and analysis")
    commands.add_parser("pause", parents=[common], help="set spec.paused")
    commands.add_parser("abort", parents=[common], help="set status.abort: traffic back to stable")
    rollback = commands.add_parser("rollback", parents=[common], help="restore an earlier pod template (undo)")
    rollback.add_argument("--to-revision", type=int, default=0, help="revision to restore (0: the previous one)")
    scale = commands.add_parser("scale", parents=[common], help="replicas of the Rollout (or its HPA's floor)")
    scale.add_argument("--replicas", type=int, required=True)
    model = commands.add_parser("model", parents=[common], help="load, unload or reload a model on Triton")
    model.add_argument("action", choices=["load", "unload", "reload"])
    model.add_argument("name")
    model.add_argument("--version", help="load/reload: the version that must be ready afterwards")
    args = parser.parse_args(argv)
    if args.command == "scale" and args.replicas < 0:
        parser.error("scale: --replicas must be >= 0")
    if args.command == "model" and args.action == "unload" and args.version:
        parser.error("model unload: Triton unloads every version of a model; --version is for load and reload")
    return args


def _dry_run(requests: list[ApiRequest]) -> None:
    print("# --dry-run: not sent")
    for request in requests:
        print(request.render())
        print()


def _kube(args: argparse.Namespace) -> Kube:
    return Kube(args.namespace, args.kubeconfig, args.context)


def _status_first(kube: Kube, plan: rollout.StatusFirst, dry_run: bool) -> None:
    """Send as the plugin does: the status patch, the fallback instead of the spec patch on 404."""
    if dry_run:
        _dry_run([kube.request(p) for p in (plan.status, plan.spec) if p])
        if plan.fallback:
            print("# if the status subresource answers 404 (Rollouts before v0.10), the plugin sends instead:")
            print(kube.request(plan.fallback).render())
        return
    spec = plan.spec
    if plan.status:
        try:
            kube.apply(plan.status)
        except RefusedError as exc:
            if exc.status != 404:
                raise
            spec = plan.fallback
    if spec:
        kube.apply(spec)


def _one(kube: Kube, patch: Patch, dry_run: bool) -> None:
    if dry_run:
        _dry_run([kube.request(patch)])
    else:
        kube.apply(patch)


def cmd_status(args: argparse.Namespace) -> int:
    failures: list[RunbookError] = []
    if args.only != "triton":
        try:
            kube = _kube(args)
            if args.dry_run:
                rollout_get = ApiRequest("GET", kube.host + kube.rollout_path(args.rollout))
                _dry_run([rollout_get, ApiRequest("GET", kube.host + kube.hpa_path())])
            else:
                ro = kube.get_rollout(args.rollout)
                print("\n".join(rollout.summary(ro)))
                for hpa in kube.list_hpas():
                    target = hpa["spec"].get("scaleTargetRef") or {}
                    if target.get("kind") == "Rollout" and target.get("name") == args.rollout:
                        spec, current = hpa["spec"], (hpa.get("status") or {}).get("currentReplicas", "?")
                        print(
                            f"  hpa:      {hpa['metadata']['name']}: min {spec.get('minReplicas', 1)}, "
                            f"max {spec.get('maxReplicas')}, current {current}"
                        )
        except RunbookError as exc:
            failures.append(exc)
            print(f"Rollout {args.namespace}/{args.rollout}: {exc}", file=sys.stderr)
    if args.only != "rollout":
        triton = Triton(args.triton_url, args.timeout)
        try:
            if args.dry_run:
                _dry_run(
                    [triton.request("GET", "/v2/health/ready"), triton.request("POST", "/v2/repository/index", {})]
                )
            else:
                ready = "ready" if triton.server_ready() else "NOT ready"
                print(f"Triton {triton.url}: {ready}")
                for entry in triton.index():
                    reason = f" ({entry['reason']})" if entry.get("reason") else ""
                    state = entry.get("state", "(not loaded)")
                    print(f"  {entry.get('name')} version {entry.get('version', '-')}: {state}{reason}")
        except RunbookError as exc:
            failures.append(exc)
            print(f"Triton {triton.url}: {exc}", file=sys.stderr)
    return max((exc.exit_code for exc in failures), default=0)


def cmd_promote(args: argparse.Namespace) -> int:
    kube = _kube(args)
    plan = rollout.promote(kube.get_rollout(args.rollout), args.full)
    if plan.empty():
        print(f"rollout '{args.rollout}': nothing to promote (not paused, no steps left, canary is stable)")
        return 0
    _status_first(kube, plan, args.dry_run)
    if not args.dry_run:
        print(f"rollout '{args.rollout}' {'fully promoted' if args.full else 'promoted'}")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    _one(_kube(args), rollout.pause(args.rollout), args.dry_run)
    if not args.dry_run:
        print(f"rollout '{args.rollout}' paused")
    return 0


def cmd_abort(args: argparse.Namespace) -> int:
    _status_first(_kube(args), rollout.abort(args.rollout), args.dry_run)
    if not args.dry_run:
        print(f"rollout '{args.rollout}' aborted: all traffic goes back to stable")
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    kube = _kube(args)
    ro = kube.get_rollout(args.rollout)
    patch, what = rollout.undo(ro, kube.list_replicasets(rollout.label_selector(ro)), args.to_revision)
    if patch is None:
        print(f"rollout '{args.rollout}': {what}")
        return 0
    _one(kube, patch, args.dry_run)
    if not args.dry_run:
        print(f"rollout '{args.rollout}' undo: {what}")
    return 0


def cmd_scale(args: argparse.Namespace) -> int:
    kube = _kube(args)
    patch, why = rollout.scale(kube.get_rollout(args.rollout), kube.list_hpas(), args.replicas)
    print(why)
    _one(kube, patch, args.dry_run)
    return 0


def cmd_model(args: argparse.Namespace) -> int:
    triton = Triton(args.triton_url, args.timeout)
    verb = "unload" if args.action == "unload" else "load"
    if args.dry_run:
        _dry_run([triton.action(args.name, verb)])
        check = "not ready" if args.action == "unload" else "ready"
        version = f" (and version {args.version})" if args.version else ""
        print(f"# then: GET /v2/models/{args.name}/ready until the model{version} is {check}")
        return 0
    if args.action == "load":
        triton.load(args.name, args.version)
    elif args.action == "reload":
        triton.reload(args.name, args.version)
    else:
        triton.unload(args.name)
    print(f"{args.action}ed: {triton.describe(args.name)}")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "status": cmd_status,
    "promote": cmd_promote,
    "pause": cmd_pause,
    "abort": cmd_abort,
    "rollback": cmd_rollback,
    "scale": cmd_scale,
    "model": cmd_model,
}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        return COMMANDS[args.command](args)
    except RunbookError as exc:
        print(f"runbook {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
