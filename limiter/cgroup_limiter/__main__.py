"""python -m cgroup_limiter --config /etc/cgroup-limiter/config.yaml [--cgroup-root DIR] [--pods-file FILE]"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from cgroup_limiter.agent import Agent
from cgroup_limiter.config import ON_EXIT_CHOICES, ConfigError, load_config
from cgroup_limiter.metrics import Metrics, serve
from cgroup_limiter.pods import FilePodSource, PodSource, PodSourceError

log = logging.getLogger("cgroup_limiter")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cgroup_limiter", description="cgroup v2 IO/CPU limiter node agent")
    parser.add_argument("--config", type=Path, required=True, help="node config YAML")
    parser.add_argument("--cgroup-root", type=Path, default=Path("/sys/fs/cgroup"), help="cgroup v2 mount")
    parser.add_argument(
        "--pods-file", type=Path, help="PodList JSON (kubectl get pods -o json) instead of the Kubernetes API"
    )
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""), help="default: $NODE_NAME")
    parser.add_argument("--on-exit", choices=ON_EXIT_CHOICES, help="override the config's on_exit")
    parser.add_argument("--metrics-port", type=int, help="override the config's metrics.port (0: no endpoint)")
    parser.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    return parser.parse_args(argv)


def pod_source(args: argparse.Namespace, metrics: Metrics) -> PodSource:
    if args.pods_file:
        return FilePodSource(args.pods_file, args.node_name or None)
    from cgroup_limiter.kube_source import KubernetesPodSource

    return KubernetesPodSource(args.node_name, metrics=metrics)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    metrics = Metrics()
    try:
        config = load_config(args.config)
        source = pod_source(args, metrics)
    except (ConfigError, PodSourceError) as error:
        print(f"cgroup_limiter: {error}", file=sys.stderr)
        return 2
    overrides = {}
    if args.on_exit:
        overrides["on_exit"] = args.on_exit
    if args.metrics_port is not None:
        overrides["metrics_port"] = args.metrics_port
    config = config.__class__(**{**config.__dict__, **overrides})
    agent = Agent(config, source, args.cgroup_root, metrics)
    stop = threading.Event()

    def on_signal(number: int, _frame: FrameType | None) -> None:
        log.info("signal %s: stopping", signal.Signals(number).name)
        stop.set()
        agent.wake()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = serve(metrics, agent.healthy, config.metrics_address, config.metrics_port) if config.metrics_port else None
    log.info(
        "watching %s every %.2fs (pods from %s, adaptive: %s, on exit: %s)",
        args.cgroup_root,
        config.interval_seconds,
        args.pods_file or f"a watch of the Kubernetes API, node {args.node_name}",
        config.adaptive.mode if config.adaptive.enabled else "off",
        config.on_exit,
    )
    agent.run(stop)
    if server:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
