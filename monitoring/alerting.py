"""The Alertmanager configuration of every environment, read from monitoring/alertmanager.yml.

The receivers' URLs are secrets: each webhook reads its URL from a file (`url_file`) of the
Secret RECEIVERS_SECRET, which the Prometheus operator mounts under SECRET_MOUNT
(`alertmanagerSpec.secrets` of kube-prometheus-stack). `load()` refuses a config whose routes
name an undefined receiver or whose webhooks read a file outside that Secret, naming the file
and the key. `with_urls()` writes `<base URL>/<key>` in place of each file, for an Alertmanager
that reads no `url_file` (Debian 12's 0.25, the serving lab's and amtool's: `url_file` came in
0.26).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

SOURCE = Path(__file__).resolve().parent / "alertmanager.yml"
RECEIVERS_SECRET = "alertmanager-receivers"
# Where the operator mounts each Secret named in alertmanagerSpec.secrets.
SECRET_MOUNT = "/etc/alertmanager/secrets"
# The folder of the receivers' Secret, where each webhook's `url_file` must be.
_FILES = f"{SECRET_MOUNT}/{RECEIVERS_SECRET}/"


class AlertingError(ValueError):
    """A bad Alertmanager config; the message starts with the file and the key."""


def routes(config: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(path, route) of every route of a config, the root first: route, route.routes[0], ..."""

    def walk(route: Mapping[str, Any], where: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        yield where, route
        for index, child in enumerate(route.get("routes") or []):
            yield from walk(child, f"{where}.routes[{index}]")

    yield from walk(config.get("route") or {}, "route")


def webhooks(config: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """(key path, receiver name, webhook config) of every webhook of a config."""
    for index, receiver in enumerate(config.get("receivers") or []):
        for hook_index, hook in enumerate(receiver.get("webhook_configs") or []):
            yield f"receivers[{index}].webhook_configs[{hook_index}]", receiver["name"], hook


def _key(hook: Mapping[str, Any]) -> str:
    return str(hook.get("url_file", "")).removeprefix(_FILES)


def secret_keys(config: Mapping[str, Any]) -> list[str]:
    """The keys of RECEIVERS_SECRET that the webhooks read their URLs from, in file order."""
    return [_key(hook) for _, _, hook in webhooks(config)]


def problems(config: Any, source: str) -> list[str]:
    """Each problem of a parsed config, starting with `source: <key>:`."""
    if not isinstance(config, Mapping) or not isinstance(config.get("route"), Mapping):
        return [f"{source}: not an Alertmanager config (no `route:` mapping)"]
    receivers = [receiver.get("name") for receiver in config.get("receivers") or []]
    found = [
        f"{source}: {where}.receiver: {route['receiver']!r} is not a receiver ({', '.join(map(str, receivers))})"
        for where, route in routes(config)
        if "receiver" in route and route["receiver"] not in receivers
    ]
    if "receiver" not in config["route"]:
        found.append(f"{source}: route.receiver: the root route has no receiver")
    for where, name, hook in webhooks(config):
        url_file, key = str(hook.get("url_file", "")), _key(hook)
        if "url" in hook or not url_file.startswith(_FILES) or not key or "/" in key:
            found.append(
                f"{source}: {where} (receiver {name!r}): a URL is a secret: read it with"
                f" `url_file: {_FILES}<key>` from the Secret {RECEIVERS_SECRET}, not from git"
            )
    keys = secret_keys(config)
    found += [f"{source}: two webhooks read the key {key!r}" for key in sorted({k for k in keys if keys.count(k) > 1})]
    return found


def load(path: Path = SOURCE, shown_as: str = "monitoring/alertmanager.yml") -> dict[str, Any]:
    """The config, once it names only defined receivers and reads every URL from the Secret."""
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise AlertingError(f"{shown_as}: cannot read it: {exc}") from exc
    found = problems(config, shown_as)
    if found:
        raise AlertingError("\n".join(found))
    return config


def with_urls(config: Mapping[str, Any], base_url: str) -> dict[str, Any]:
    """The config with each webhook's `url_file` replaced by `url`: `base_url/<the Secret's key>`."""
    result = copy.deepcopy(dict(config))
    for _, _, hook in webhooks(result):
        hook["url"] = f"{base_url}/{_key(hook)}"
        del hook["url_file"]
    return result
