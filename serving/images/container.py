"""Run an image with podman on the host's network (loopback only): `with Container(tag, env) as c:`
removes the container on exit, also when the block fails."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from types import TracebackType

from serving.images.podman import podman, podman_ok


class Container:
    def __init__(self, tag: str, env: Mapping[str, str]) -> None:
        self.tag = tag
        self.env = dict(env)
        self.name = f"gpu-serving-test-{uuid.uuid4().hex[:12]}"

    def start(self) -> None:
        env = [f"--env={key}={value}" for key, value in self.env.items()]
        podman("run", "--detach", f"--name={self.name}", "--network=host", *env, self.tag)

    def running(self) -> bool:
        return (
            podman_ok("container", "exists", self.name)
            and podman("inspect", "--format={{.State.Running}}", self.name).strip() == "true"
        )

    def logs(self) -> str:
        return podman("logs", self.name) if podman_ok("container", "exists", self.name) else ""

    def remove(self) -> None:
        if podman_ok("container", "exists", self.name):
            podman("rm", "--force", "--time=5", self.name)

    def __enter__(self) -> Container:
        try:
            self.start()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.remove()
