"""A desired-state change in a git checkout: the environment's stack file written, its
deploy/serving/<env>/ rendered again (the command `make render ENV=<env>` runs), and the result
left as a commit-ready diff. Nothing is sent to a cluster: Argo CD syncs the change once it is
pushed, and its self-heal keeps it, where a live patch of an object it syncs would be put back.

Bad input leaves both unchanged: a refused check or render restores the stack file byte for byte
and deploy/serving/<env>/ file for file.
"""

from __future__ import annotations

import difflib
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from serving.runbook.errors import RefusedError, RunbookError, UsageError

ROOT = Path(__file__).resolve().parents[2]
RENDER_TIMEOUT = 300


@dataclass(frozen=True)
class Checkout:
    """One environment of a git checkout of this repository."""

    root: Path
    env: str

    @property
    def stack_rel(self) -> str:
        return f"pulumi/Pulumi.{self.env}.yaml"

    @property
    def deploy_rel(self) -> str:
        return f"deploy/serving/{self.env}"

    @property
    def stack(self) -> Path:
        return self.root / self.stack_rel

    def git(self, *args: str) -> str:
        run = subprocess.run(["git", *args], cwd=self.root, capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise RefusedError(f"git {' '.join(args)} in {self.root}: {run.stderr.strip()}")
        return run.stdout

    def log(self, path: str) -> list[tuple[str, str]]:
        """(commit, subject) of each commit that changed `path`, newest first."""
        lines = self.git("log", "--format=%H %s", "--", path).splitlines()
        return [(commit, subject) for commit, _, subject in (line.partition(" ") for line in lines)]

    def show(self, commit: str, path: str) -> str | None:
        """`path` as of `commit`, None where that commit has no such file (it deleted it)."""
        run = subprocess.run(
            ["git", "show", f"{commit}:{path}"], cwd=self.root, capture_output=True, text=True, check=False
        )
        return run.stdout if run.returncode == 0 else None

    def render(self) -> None:
        """deploy/serving/<env>/ from the stack file, as `make render ENV=<env>` does it."""
        run = subprocess.run(
            [sys.executable, "-m", "gpu_serving.render", "--env", self.env, "--out", self.deploy_rel],
            cwd=self.root,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(self.root), str(self.root / "pulumi")])},
            capture_output=True,
            text=True,
            timeout=RENDER_TIMEOUT,
            check=False,
        )
        if run.returncode != 0:
            reason = (run.stderr or run.stdout).strip().removeprefix("render: ")
            raise RefusedError(f"the render (make render ENV={self.env}) refuses the change: {reason}")


def open_checkout(root: Path, env: str) -> Checkout:
    """The environment `env` of the git checkout at `root`; UsageError when either is missing."""
    checkout = Checkout(root.resolve(), env)
    inside = subprocess.run(
        ["git", "rev-parse", "--is-inside-work-tree"], cwd=checkout.root, capture_output=True, text=True, check=False
    )
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        raise UsageError(f"{checkout.root} is not a git checkout: a desired-state change is a commit")
    if not checkout.stack.is_file():
        known = sorted(path.name.split(".")[1] for path in (checkout.root / "pulumi").glob("Pulumi.*.yaml"))
        raise UsageError(f"{checkout.stack_rel}: no such stack file (environments: {', '.join(known)})")
    return checkout


def _snapshot(folder: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()} if folder.exists() else {}


def _restore(folder: Path, snapshot: dict[Path, bytes]) -> None:
    for path in _snapshot(folder).keys() - snapshot.keys():
        path.unlink()
    for path, data in snapshot.items():
        if not path.is_file() or path.read_bytes() != data:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    for directory in sorted((d for d in folder.rglob("*") if d.is_dir()), reverse=True) if folder.exists() else []:
        if not any(directory.iterdir()) and not any(p.is_relative_to(directory) for p in snapshot):
            directory.rmdir()


def commit_ready(
    checkout: Checkout,
    text: str,
    message: str,
    check: Callable[[], list[str]] | None = None,
    also_add: tuple[str, ...] = (),
) -> None:
    """Write `text` as the stack file, run `check` (problems refuse it), render, and print the diff
    and the commit to make; on any failure, put the stack file and the render back as they were."""
    stack, deploy = checkout.stack, checkout.root / checkout.deploy_rel
    before = stack.read_bytes()
    if text.encode("utf-8") == before:
        print(f"{checkout.stack_rel}: already so; nothing to change")
        return
    dirty = checkout.git("status", "--porcelain", "--", checkout.stack_rel, checkout.deploy_rel)
    rendered = _snapshot(deploy)
    try:
        stack.write_text(text, encoding="utf-8")
        if check is not None and (problems := check()):
            raise RefusedError("; ".join(problems))
        checkout.render()
    except RunbookError as err:
        stack.write_bytes(before)
        _restore(deploy, rendered)
        raise type(err)(f"{err}; {checkout.stack_rel} and {checkout.deploy_rel}/ are left as they were") from None
    except BaseException:
        stack.write_bytes(before)
        _restore(deploy, rendered)
        raise
    _report(checkout, before.decode("utf-8"), text, message, dirty, also_add)


def _report(checkout: Checkout, before: str, after: str, message: str, dirty: str, also_add: tuple[str, ...]) -> None:
    name = checkout.stack_rel
    diff = difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{name}", f"b/{name}")
    print("".join(diff), end="")
    print(f"rendered {checkout.deploy_rel}/ (make render ENV={checkout.env}); nothing was sent to the cluster")
    if dirty:
        print(f"note: uncommitted changes were there before this command, and are part of this diff:\n{dirty}", end="")
    print(checkout.git("diff", "--stat", "--", name, checkout.deploy_rel), end="")
    for new in checkout.git("ls-files", "--others", "--exclude-standard", "--", checkout.deploy_rel).splitlines():
        print(f" {new} (new)")
    paths = " ".join(shlex.quote(path) for path in (name, checkout.deploy_rel, *also_add))
    print("Commit it, then push: Argo CD syncs the change (review with git diff):")
    print(f"  git add {paths} && git commit -m {shlex.quote(message)}")
    print(f"Or drop it: git checkout -- {name} && make render ENV={checkout.env}")
