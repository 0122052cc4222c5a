"""The serving lab: tritonserver, Prometheus and Alertmanager as local processes on loopback.

Prometheus scrapes Triton (job "triton", the name the ServiceMonitor in pulumi/ gives it) and,
when a target is given, the limiter agent (job "cgroup-limiter", as in roles/k8s_addons) and
the drift agent (job "drift-agent", its Service's name in pulumi/), evaluates the rules and
sends alerts to Alertmanager, which routes them: unless a caller gives other files, the rules
and the Alertmanager config that the lab's environment deploys, read back from its rendered
deploy/serving/dev/ (lab_fleet/deployed.py).
Ports are free loopback ports, recorded with the process ids in `<run_dir>/state.json`, so
`status`, `down` and `reload` work from another process (`scripts/serve-lab`). Logs and data stay under the run dir.
A port found free can be taken by another process before the server binds it (a parallel test
worker, an outgoing connection); a server whose log says so is started again on new ports.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from lab_fleet import deployed
from model_repo_check.tritonserver.processes import (
    LOOPBACK,
    ServerError,
    command_of,
    free_port,
    group_members,
    http_ok,
    spawn,
    stop_group,
    wait_for,
    wait_ready,
)
from model_repo_check.tritonserver.server import REPO, TRITON_VENV, TritonProcess, remove_shm
from platform_matrix import DEFAULT_PATH as MATRIX_PATH
from platform_matrix import load as load_matrix

# Scrape and rule-evaluation interval of the lab's Prometheus: short, so tests wait little.
SCRAPE_INTERVAL_S = 2
DEFAULT_RUN_DIR = REPO / ".lab/serving"
DEFAULT_MODEL_REPOSITORY = REPO / "model_repository"
# Where the receivers of the lab's Alertmanager post unless a caller gives its own: the discard
# port on loopback, where nothing listens (a refused delivery is logged, nothing leaves the host).
NOWHERE = f"http://{LOOPBACK}:9"
TRITON_JOB = "triton"
LIMITER_JOB = "cgroup-limiter"
DRIFT_JOB = "drift-agent"
GATEWAY_JOB = "gateway"  # as the gateway's Service and ServiceMonitor name it (pulumi/)
# Debian package -> its server binary (the lab checks the version of each against the matrix).
BINARIES = {"prometheus": "prometheus", "prometheus-alertmanager": "prometheus-alertmanager"}
HEALTH_PATHS = {"tritonserver": "/v2/health/ready", "prometheus": "/-/ready", "alertmanager": "/-/ready"}
# Starts of one server on fresh ports, when each earlier one failed on a port taken meanwhile.
PORT_ATTEMPTS = 3
# How the servers say that a port is taken: Go's "bind: address already in use" (Prometheus,
# Alertmanager), tritonserver's "Socket '127.0.0.1:PORT' already in use" (HTTP, metrics) and its
# gRPC server's "Address already in use". Triton exits on a taken HTTP or gRPC port, but serves on
# without metrics when the metrics port is taken.
_PORT_TAKEN = re.compile(r"already in use", re.IGNORECASE)


class LabError(RuntimeError):
    pass


class ConfigRejectedError(LabError):
    """promtool or amtool refused a file; the message names the file and the problem."""


class VersionMismatchError(LabError):
    pass


def _version_of(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        package = next(p for p, b in BINARIES.items() if b == binary)
        raise VersionMismatchError(f"{binary} is not on PATH: install the Debian package {package} (`make deps`)")
    result = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
    found = re.search(r"version (\d+\.\d+\.\d+)", result.stdout + result.stderr)
    if not found:
        raise VersionMismatchError(f"`{path} --version` printed no version: {result.stdout}{result.stderr}")
    return found.group(1)


def check_versions(matrix_path: Path = MATRIX_PATH) -> dict[str, str]:
    """The installed versions, checked against the matrix's `serving_lab`; raises on the first mismatch."""
    lab = load_matrix(matrix_path).serving_lab
    found: dict[str, str] = {}
    for package, minor in lab["debian_packages"].items():
        version = found[package] = _version_of(BINARIES[package])
        if not f"{version}.".startswith(f"{minor}."):
            raise VersionMismatchError(
                f"{BINARIES[package]} is {version}, but {matrix_path} serving_lab.debian_packages.{package} "
                f"expects {minor}.x: install Debian 12's {package} or change the matrix"
            )
    wheel, expected = lab["triton"]["wheel"], lab["triton"]["wheel_version"]
    dists = metadata.distributions(path=[str(p) for p in TRITON_VENV.glob("lib/python3.*/site-packages")])
    version = found[wheel] = next((d.version for d in dists if d.metadata["Name"] == wheel), "not installed")
    if version != expected:
        raise VersionMismatchError(
            f"{TRITON_VENV} has {wheel} {version}, but {matrix_path} serving_lab.triton.wheel_version "
            f"expects {expected}: run `make .venv-triton/.stamp`"
        )
    return found


def validate(rules: Path, alertmanager_config: Path) -> None:
    """`promtool check rules` and `amtool check-config`; ConfigRejectedError names the file and the problem."""
    for path, argv in (
        (rules, ["promtool", "check", "rules"]),
        (alertmanager_config, ["amtool", "check-config"]),
    ):
        if not path.is_file():
            raise ConfigRejectedError(f"{path}: no such file")
        result = subprocess.run([*argv, str(path)], capture_output=True, text=True, timeout=60, check=False)
        if result.returncode != 0:
            output = "\n".join(part.strip() for part in (result.stdout, result.stderr) if part.strip())
            problem = output.replace("\n", "\n  ")
            raise ConfigRejectedError(f"{path}: `{' '.join(argv)}` refused it:\n  {problem}")


def prometheus_config(
    triton_metrics: str,
    alertmanager: str,
    rules: Path,
    limiter: str | None,
    drift: str | None = None,
    gateway: str | None = None,
) -> dict[str, Any]:
    optional = ((LIMITER_JOB, limiter), (DRIFT_JOB, drift), (GATEWAY_JOB, gateway))
    jobs = [(TRITON_JOB, triton_metrics)] + [(job, target) for job, target in optional if target]
    interval = f"{SCRAPE_INTERVAL_S}s"
    return {
        "global": {
            "scrape_interval": interval,
            "evaluation_interval": interval,
            "scrape_timeout": interval,
            # The label the Alertmanager routes group and inhibit by, as on a real cluster.
            "external_labels": {"cluster": "serving-lab"},
        },
        "rule_files": [str(rules)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]} for job, target in jobs],
    }


def _copy(source: Path, target: Path) -> None:
    """Replace `target` atomically, so a reload never reads half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    shutil.copyfile(source, partial)
    os.replace(partial, target)


def port_taken(log: Path) -> bool:
    """The server's log says that a port it was given is taken."""
    return log.is_file() and bool(_PORT_TAKEN.search(log.read_text(errors="replace")))


def start_on_free_ports(start: Callable[[], None], log: Path, attempts: int = PORT_ATTEMPTS) -> int:
    """`start()` (which chooses its ports anew and stops what it started when it fails), again
    while it fails on a taken port, `attempts` times at most; returns the attempts it took."""
    for attempt in range(1, attempts):
        try:
            start()
            return attempt
        except ServerError:
            if not port_taken(log):
                raise
    start()
    return attempts


def _post(url: str) -> None:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=30) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        raise LabError(f"POST {url} answered {exc.code}: {exc.read().decode(errors='replace')}") from exc


class ServingLab:
    """`up` starts Alertmanager, Triton and Prometheus (in that order); `down` stops what is recorded."""

    def __init__(
        self,
        run_dir: Path = DEFAULT_RUN_DIR,
        model_repository: Path = DEFAULT_MODEL_REPOSITORY,
        rules: Path | None = None,
        alertmanager_config: Path | None = None,
        limiter_target: str | None = None,
        drift_target: str | None = None,
        triton_args: Sequence[str] = (),
        matrix_path: Path = MATRIX_PATH,
        detached: bool = False,
    ) -> None:
        self.run_dir = Path(run_dir).resolve()
        # Detached servers outlive this process (scripts/serve-lab up, then down); otherwise the
        # kernel stops them when it dies, teardown or not (processes.spawn).
        self.detached = detached
        # Unless given: what the lab's environment (deployed.LAB_ENV) deploys, as rendered under
        # deploy/, written here by up().
        self._deployed = self.run_dir / "deployed"
        self._reads_deploy = rules is None or alertmanager_config is None
        self.rules = Path(rules).resolve() if rules else self._deployed / "rules.yml"
        self.alertmanager_config = (
            Path(alertmanager_config).resolve() if alertmanager_config else self._deployed / "alertmanager.yml"
        )
        self.limiter_target = limiter_target
        self.drift_target = drift_target  # HOST:PORT of a drift agent the caller starts (lab_fleet/drift.py)
        self.gateway_target: str | None = None  # HOST:PORT of a gateway the caller starts: scrape_gateway()
        self.matrix_path = Path(matrix_path)
        self.state_file = self.run_dir / "state.json"
        self.triton = TritonProcess(model_repository, self.run_dir / "triton", triton_args)
        self.triton.outlive_caller = detached
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # --- state ------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The recorded lab, or {} when none was started here."""
        try:
            return json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return {}

    def _record(self, **changes: Any) -> None:
        state = self.state()
        for key, value in changes.items():
            state.setdefault(key, {}).update(value)
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        partial = self.state_file.with_suffix(".partial")
        partial.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
        os.replace(partial, self.state_file)

    def _url(self, name: str) -> str:
        try:
            return self.state()["urls"][name]
        except KeyError:
            raise LabError(f"the serving lab in {self.run_dir} is not running (no {name} recorded)") from None

    @property
    def prometheus_url(self) -> str:
        return self._url("prometheus")

    @property
    def alertmanager_url(self) -> str:
        return self._url("alertmanager")

    def urls(self) -> dict[str, str]:
        return dict(self.state().get("urls", {}))

    # --- lifecycle ----------------------------------------------------------------------------

    def up(self, timeout: float = 60) -> None:
        """Check versions and configs, then start everything; on any failure stop what started."""
        if self._running():
            raise LabError(f"the serving lab in {self.run_dir} is already running: `scripts/serve-lab down` first")
        check_versions(self.matrix_path)
        if self._reads_deploy:
            deployed.write(self._deployed, NOWHERE)
        validate(self.rules, self.alertmanager_config)
        for leftover in ("prometheus/data", "alertmanager/data", "state.json"):
            shutil.rmtree(self.run_dir / leftover, ignore_errors=True)
            (self.run_dir / leftover).unlink(missing_ok=True)
        _copy(self.rules, self.run_dir / "prometheus/rules.yml")
        _copy(self.alertmanager_config, self.run_dir / "alertmanager/alertmanager.yml")
        self._record(sources={"rules": str(self.rules), "alertmanager_config": str(self.alertmanager_config)})
        try:
            for name, start in (
                ("alertmanager", self._start_alertmanager),
                ("tritonserver", self._start_triton),
                ("prometheus", self._start_prometheus),
            ):
                began = time.monotonic()
                attempts = start_on_free_ports(functools.partial(start, timeout), self._log(name))
                self._record(
                    startup_seconds={name: round(time.monotonic() - began, 2)}, start_attempts={name: attempts}
                )
        except BaseException:
            self.down()
            raise

    def _log(self, name: str) -> Path:
        return self.triton.log if name == "tritonserver" else self.run_dir / name / f"{name}.log"

    def _start_alertmanager(self, timeout: float) -> None:
        port = free_port()
        base = self.run_dir / "alertmanager"
        argv = [
            shutil.which(BINARIES["prometheus-alertmanager"]) or BINARIES["prometheus-alertmanager"],
            f"--config.file={base / 'alertmanager.yml'}",
            f"--storage.path={base / 'data'}",
            f"--web.listen-address={LOOPBACK}:{port}",
            "--cluster.listen-address=",  # no HA gossip port
        ]
        self._spawn("alertmanager", argv, f"http://{LOOPBACK}:{port}", timeout)

    def _start_triton(self, timeout: float) -> None:
        self.triton.start(timeout)
        if port_taken(self.triton.log):  # ready, but without the metrics port that Prometheus scrapes
            self.triton.stop()
            raise ServerError("tritonserver started without a port it was given", self.triton.log)
        self._record(
            processes={
                "tritonserver": {
                    "pid": self.triton.pid,
                    "executable": self.triton.command()[0],
                    "shm_prefix": self.triton.shm_prefix,
                }
            },
            urls={
                "tritonserver": self.triton.http_url,
                "triton_grpc": self.triton.grpc_url,
                "triton_metrics": self.triton.metrics_url,
            },
        )
        with urllib.request.urlopen(f"{self.triton.http_url}/v2", timeout=10) as response:
            server = json.load(response)["version"]
        expected = load_matrix(self.matrix_path).serving_lab["triton"]["server_version"]
        if server != expected:
            raise VersionMismatchError(
                f"tritonserver reports {server}, {self.matrix_path} serving_lab.triton.server_version is {expected}"
            )

    def _write_prometheus_config(self) -> None:
        base = self.run_dir / "prometheus"
        metrics = self.triton.metrics_url.removeprefix("http://").removesuffix("/metrics")
        alertmanager = self.alertmanager_url.removeprefix("http://")
        config = prometheus_config(
            metrics, alertmanager, base / "rules.yml", self.limiter_target, self.drift_target, self.gateway_target
        )
        partial = base / "prometheus.yml.partial"
        partial.write_text(yaml.safe_dump(config, sort_keys=False))
        partial.replace(base / "prometheus.yml")

    def _start_prometheus(self, timeout: float) -> None:
        port = free_port()
        base = self.run_dir / "prometheus"
        self._write_prometheus_config()
        argv = [
            shutil.which(BINARIES["prometheus"]) or BINARIES["prometheus"],
            f"--config.file={base / 'prometheus.yml'}",
            f"--storage.tsdb.path={base / 'data'}",
            f"--web.listen-address={LOOPBACK}:{port}",
            "--web.enable-lifecycle",
        ]
        url = f"http://{LOOPBACK}:{port}"
        self._spawn("prometheus", argv, url, timeout)
        wait_for(
            lambda: self._target_health(TRITON_JOB) == "up",
            timeout,
            f"Prometheus at {url} to scrape tritonserver ({self.triton.metrics_url}) successfully",
        )

    def _spawn(self, name: str, argv: list[str], url: str, timeout: float) -> None:
        """Start one server and wait until it is ready; a server that is not is stopped again."""
        proc = self._procs[name] = spawn(argv, self._log(name), outlive_caller=self.detached)
        self._record(processes={name: {"pid": proc.pid, "executable": argv[0]}}, urls={name: url})
        try:
            wait_ready(url + HEALTH_PATHS[name], timeout, name, proc, self._log(name))
        except BaseException:
            stop_group(proc.pid)
            proc.wait()
            del self._procs[name]
            raise

    def scrape_gateway(self, target: str) -> None:
        """Scrape a gateway started after `up` (on a port of its own choice, so a taken one could
        be retried) as job gateway: Prometheus reloads its config with that target added."""
        self.gateway_target = target
        self._write_prometheus_config()
        _post(f"{self.prometheus_url}/-/reload")

    def _target_health(self, job: str) -> str | None:
        with urllib.request.urlopen(f"{self.prometheus_url}/api/v1/targets?state=active", timeout=5) as response:
            targets = json.load(response)["data"]["activeTargets"]
        return next((t["health"] for t in targets if t["labels"].get("job") == job), None)

    @staticmethod
    def _alive(entry: Mapping[str, Any]) -> bool:
        """The recorded pid still runs the recorded executable (a reused pid is not ours)."""
        command = command_of(entry["pid"])
        return bool(command) and command[0] == entry["executable"] and bool(group_members(entry["pid"]))

    def _running(self) -> bool:
        return any(self._alive(e) for e in self.state().get("processes", {}).values())

    def down(self) -> None:
        """Stop every recorded process and its children; forget the state. Safe to repeat."""
        self.triton.stop()
        processes = self.state().get("processes", {})
        for name in ("prometheus", "tritonserver", "alertmanager"):
            entry = processes.get(name)
            if entry and self._alive(entry):
                stop_group(entry["pid"])
            if proc := self._procs.pop(name, None):
                proc.wait()
            if entry and "shm_prefix" in entry:  # a detached lab's server, started by another process
                remove_shm(entry["shm_prefix"])
        self.state_file.unlink(missing_ok=True)

    def status(self) -> dict[str, dict[str, Any]]:
        """{process: {pid, running, url, healthy}} for every recorded process."""
        state = self.state()
        report = {}
        for name, entry in state.get("processes", {}).items():
            url = state.get("urls", {}).get(name, "")
            running = self._alive(entry)
            healthy = running and bool(url) and http_ok(url + HEALTH_PATHS[name])
            report[name] = {"pid": entry["pid"], "running": running, "url": url, "healthy": healthy}
        return report

    def reload(self, rules: Path | None = None, alertmanager_config: Path | None = None) -> None:
        """Validate first (a refusal leaves the running lab on its last good files), then copy and reload."""
        state = self.state()
        if not self._running():
            raise LabError(f"the serving lab in {self.run_dir} is not running: `scripts/serve-lab up` first")
        rules = Path(rules or state["sources"]["rules"]).resolve()
        alertmanager_config = Path(alertmanager_config or state["sources"]["alertmanager_config"]).resolve()
        validate(rules, alertmanager_config)
        _copy(rules, self.run_dir / "prometheus/rules.yml")
        _copy(alertmanager_config, self.run_dir / "alertmanager/alertmanager.yml")
        _post(f"{self.prometheus_url}/-/reload")
        _post(f"{self.alertmanager_url}/-/reload")
        self._record(sources={"rules": str(rules), "alertmanager_config": str(alertmanager_config)})
