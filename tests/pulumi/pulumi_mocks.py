"""Run the Pulumi program or a component under `pulumi.runtime.set_mocks`, recording what it registers.

The engine and the cluster are out of reach here: the mocks answer every registration with
its own inputs, and the tests assert on those inputs.
"""

from __future__ import annotations

import asyncio
import json
import os
import runpy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import yaml
from gpu_serving.config import receiver_secret_key
from pulumi.runtime import rpc

import pulumi
from monitoring import alerting

PULUMI_DIR = Path(__file__).resolve().parents[2] / "pulumi"
PROJECT = "gpu-serving"
SECRET = f"{PROJECT}:grafanaAdminPassword"
# The receivers' URLs a stack's secrets hold: key of the Secret alertmanager-receivers -> URL.
RECEIVER_URLS = {key: f"https://hooks.example.test/{key}/t0ken" for key in alerting.secret_keys(alerting.load())}
# The kubeconfig the program's runs find in $KUBECONFIG: the example clusters' contexts.
KUBECONFIG = Path(__file__).with_name("kubeconfig.yaml")


@dataclass
class Registered:
    typ: str
    name: str
    inputs: dict[str, Any]
    provider: str  # the provider reference, `<urn>::<id>`; "" for the default one (or none)


@dataclass
class RecordingMocks(pulumi.runtime.Mocks):
    resources: list[Registered] = field(default_factory=list)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.resources.append(Registered(args.typ, args.name, args.inputs, args.provider or ""))
        return f"{args.name}-id", args.inputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], None]:
        return {}, None

    def of_type(self, typ: str) -> list[Registered]:
        return [r for r in self.resources if r.typ == typ]

    def one(self, typ: str, name: str) -> Registered:
        matches = [r for r in self.resources if r.typ == typ and r.name == name]
        assert len(matches) == 1, f"{typ} {name}: {[(r.typ, r.name) for r in self.resources]}"
        return matches[0]


def unwrap_secret(value: Any) -> Any:
    """Mocks see a secret input as {sig: secret sig, value: ...}; anything else is plaintext."""
    assert isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig, value
    return value["value"]


def stack_config(env: str) -> dict[str, str]:
    """The stack file's config as the engine hands it to the program (objects as JSON)."""
    document = yaml.safe_load((PULUMI_DIR / f"Pulumi.{env}.yaml").read_text(encoding="utf-8"))
    return {key: value if isinstance(value, str) else json.dumps(value) for key, value in document["config"].items()}


def run_mocked(
    env: str,
    body: Callable[[], Any],
    config: dict[str, str],
    secret_keys: list[str],
    mocks: RecordingMocks | None = None,
) -> RecordingMocks:
    """Run `body` as a Pulumi program of stack `env`, waiting until every registration is done.

    Pulumi's mocks register on the thread's current event loop; an earlier test in the same
    process may have ended with none (asyncio.run() unsets it), so each run gets its own."""
    mocks = mocks or RecordingMocks()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=env, preview=False)
        pulumi.runtime.set_all_config(config, secret_keys)
        pulumi.runtime.test(body)()
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    return mocks


def run_program(
    env: str,
    overrides: dict[str, Any] | None = None,
    password: str | None = "s3cret-for-tests",
    secret: bool = True,
    mocks: RecordingMocks | None = None,
    receivers: dict[str, str] | None = None,
    kubeconfig: Path = KUBECONFIG,
) -> RecordingMocks:
    """Run pulumi/__main__.py as `pulumi up -s env` would, with the stack file's config, the
    stack's secrets (`receivers`: RECEIVER_URLS unless given; `secret=False` sets them as plaintext)
    and `kubeconfig` as $KUBECONFIG."""
    config = stack_config(env)
    for key, value in (overrides or {}).items():
        config[f"{PROJECT}:{key}"] = value if isinstance(value, str) else json.dumps(value)
    secrets = {SECRET: password} if password is not None else {}
    for key, url in (RECEIVER_URLS if receivers is None else receivers).items():
        secrets[f"{PROJECT}:{receiver_secret_key(key)}"] = url
    config.update(secrets)
    with mock.patch.dict(os.environ, {"KUBECONFIG": str(kubeconfig)}):
        return run_mocked(
            env,
            lambda: runpy.run_path(str(PULUMI_DIR / "__main__.py"), run_name="__main__"),
            config,
            list(secrets) if secret else [],
            mocks,
        )
