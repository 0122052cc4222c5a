"""Operate the Triton release by hand: live actions on the cluster, desired-state changes in git.

The cluster as it is (reads only):
  status [--only rollout|triton]        the Rollout (phase, step, weights, hashes) and Triton's models

Live actions (the Argo Rollout `triton` and a live Triton, not in git; each prints what undoes it):
  promote [--full]                      as `kubectl argo rollouts promote [--full]`
  pause                                 as `kubectl argo rollouts pause`
  abort                                 as `kubectl argo rollouts abort`: all traffic back to stable
  model load|unload|reload NAME [--version V]   Triton's repository API, then a readiness check

Desired-state changes (pulumi/Pulumi.<env>.yaml edited, deploy/serving/<env>/ rendered again, the
commit printed; nothing is sent to the cluster, Argo CD syncs the commit once pushed):
  desired scale --env E [--workload triton|gateway] [--min N] [--max N]   the HPA's bounds
  desired triton-release --env E --release R                             the Triton release
  desired model-rollback --env E [--to sha256:<hex>]                     the previous model release

Live actions take --dry-run: it prints the exact requests that change something and sends none
of them (reads that decide the request, like the GET before a promote, are still sent).
Exit status: 0 done; 1 refused (the server answered with an error, the readiness check after a
model action failed, or the stack file or its render refused the change); 2 bad usage, no usable
kubeconfig, a server that does not answer, or no git checkout or stack file for the environment.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from serving.release.content import DIGEST
from serving.runbook import checkout, desired, rollout
from serving.runbook.api import ApiRequest
from serving.runbook.checkout import ROOT, open_checkout
from serving.runbook.desired import WORKLOAD_KEYS
from serving.runbook.errors import RefusedError, RunbookError
from serving.runbook.kube import Kube, Patch
from serving.runbook.live import notice, rollout_names
from serving.runbook.triton import Triton

DEFAULT_TRITON_URL = "http://127.0.0.1:8000"


def _digest(value: str) -> str:
    if not DIGEST.match(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not sha256:<64 hex>")
    return value


def _desired_parsers(commands: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--env", required=True, help="the environment: pulumi/Pulumi.<ENV>.yaml")
    common.add_argument(
        "--repo", type=Path, default=ROOT, help="the git checkout to change (default: the one this runbook is in)"
    )
    desired = commands.add_parser(
        "desired",
        help="change the stack file and its render: a commit, nothing live",
        description=checkout.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    changes = desired.add_subparsers(dest="change", required=True)
    scale = changes.add_parser(
        "scale",
        parents=[common],
        help="the HPA's replica bounds (gpu-serving:<workload>.replicas)",
        description="Set gpu-serving:<workload>.replicas.min/max, the bounds of the workload's HPA, and render.",
    )
    scale.add_argument("--workload", choices=sorted(WORKLOAD_KEYS), default="triton", help="(%(default)s)")
    scale.add_argument("--min", type=int, help="minReplicas (unchanged when not given)")
    scale.add_argument("--max", type=int, help="maxReplicas (unchanged when not given)")
    scale.set_defaults(run=cmd_desired_scale)
    release = changes.add_parser(
        "triton-release",
        parents=[common],
        help="the Triton release (gpu-serving:triton.release)",
        description="Set gpu-serving:triton.release, a release of the platform matrix the fleet can run "
        "(platform_matrix/matrix.yml), and render: a new pod template, which the Rollout canaries.",
    )
    release.add_argument("--release", required=True, help="a Triton release of the platform matrix, e.g. 24.05")
    release.set_defaults(run=cmd_desired_triton_release)
    rollback = changes.add_parser(
        "model-rollback",
        parents=[common],
        help="the previous model release (gpu-serving:modelRelease)",
        description="Set gpu-serving:modelRelease back to the reference it had before the current one (the "
        "stack file's git history), or to a release named with --to, which must have a publication record in "
        "model_releases/ for this environment; and render: a new pod template, which the Rollout canaries.",
    )
    rollback.add_argument("--to", type=_digest, help="a published release, sha256:<hex>, instead of the previous one")
    rollback.set_defaults(run=cmd_desired_model_rollback)


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
    status = commands.add_parser("status", parents=[common], help="the Rollout and Triton's models (reads only)")
    status.add_argument("--only", choices=["rollout", "triton"], help="show one of the two")
    status.set_defaults(run=cmd_status)
    promote = commands.add_parser(
        "promote", parents=[common], help="live: the next step (--full: to the end)", description=notice("promote")
    )
    promote.add_argument("--full", action="store_true", help="skip the remaining steps and analysis")
    promote.set_defaults(run=cmd_promote)
    commands.add_parser(
        "pause", parents=[common], help="live: set spec.paused", description=notice("pause")
    ).set_defaults(run=cmd_pause)
    commands.add_parser(
        "abort", parents=[common], help="live: set status.abort, traffic back to stable", description=notice("abort")
    ).set_defaults(run=cmd_abort)
    model = commands.add_parser(
        "model",
        parents=[common],
        help="live: load, unload or reload a model on one Triton",
        description="\n".join(notice(action) for action in ("load", "unload", "reload")),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model.add_argument("action", choices=["load", "unload", "reload"])
    model.add_argument("name")
    model.add_argument("--version", help="load/reload: the version that must be ready afterwards")
    model.set_defaults(run=cmd_model)
    _desired_parsers(commands)
    args = parser.parse_args(argv)
    if args.command == "model" and args.action == "unload" and args.version:
        parser.error("model unload: Triton unloads every version of a model; --version is for load and reload")
    if args.command == "desired" and args.change == "scale" and args.min is None and args.max is None:
        parser.error("desired scale: give --min, --max or both")
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


def _announce(args: argparse.Namespace, text: str) -> None:
    """A live action's notice: after the action, or as a comment of --dry-run's listing."""
    print(f"# {text}" if args.dry_run else text)


def cmd_promote(args: argparse.Namespace) -> int:
    kube = _kube(args)
    plan = rollout.promote(kube.get_rollout(args.rollout), args.full)
    if plan.empty():
        print(f"rollout '{args.rollout}': nothing to promote (not paused, no steps left, canary is stable)")
        return 0
    _status_first(kube, plan, args.dry_run)
    if not args.dry_run:
        print(f"rollout '{args.rollout}' {'fully promoted' if args.full else 'promoted'}")
    _announce(args, notice("promote", **rollout_names(args.namespace, args.rollout)))
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    _one(_kube(args), rollout.pause(args.rollout), args.dry_run)
    if not args.dry_run:
        print(f"rollout '{args.rollout}' paused")
    _announce(args, notice("pause", **rollout_names(args.namespace, args.rollout)))
    return 0


def cmd_abort(args: argparse.Namespace) -> int:
    _status_first(_kube(args), rollout.abort(args.rollout), args.dry_run)
    if not args.dry_run:
        print(f"rollout '{args.rollout}' aborted: all traffic goes back to stable")
    _announce(args, notice("abort", **rollout_names(args.namespace, args.rollout)))
    return 0


def cmd_model(args: argparse.Namespace) -> int:
    triton = Triton(args.triton_url, args.timeout)
    verb = "unload" if args.action == "unload" else "load"
    if args.dry_run:
        _dry_run([triton.action(args.name, verb)])
        check = "not ready" if args.action == "unload" else "ready"
        version = f" (and version {args.version})" if args.version else ""
        print(f"# then: GET /v2/models/{args.name}/ready until the model{version} is {check}")
    elif args.action == "load":
        triton.load(args.name, args.version)
    elif args.action == "reload":
        triton.reload(args.name, args.version)
    else:
        triton.unload(args.name)
    if not args.dry_run:
        print(f"{args.action}ed: {triton.describe(args.name)}")
    _announce(args, notice(args.action, model=args.name, url=triton.url))
    return 0


def cmd_desired_scale(args: argparse.Namespace) -> int:
    desired.scale(open_checkout(args.repo, args.env), args.workload, args.min, args.max)
    return 0


def cmd_desired_triton_release(args: argparse.Namespace) -> int:
    desired.triton_release(open_checkout(args.repo, args.env), args.release)
    return 0


def cmd_desired_model_rollback(args: argparse.Namespace) -> int:
    desired.model_rollback(open_checkout(args.repo, args.env), args.to)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    name = " ".join(filter(None, (args.command, getattr(args, "change", None))))
    try:
        return args.run(args)
    except RunbookError as exc:
        print(f"runbook {name}: {exc}", file=sys.stderr)
        return exc.exit_code
