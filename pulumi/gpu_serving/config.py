"""The stack config, read once into frozen dataclasses and validated before any resource exists.

Two readers feed the same parser: `from_pulumi()` (the engine's config, under `pulumi up` and
in the mock tests) and `from_stack_file()` (the Pulumi.<env>.yaml file itself, for `make
render`). Every error names the stack file and the `gpu-serving:` key. Both refuse a
placeholder left by scripts/new-environment (gpu_serving.markers), in the stack config or in
the inventory it names, before anything else; `from_pulumi()` also refuses a kube context that
the kubeconfig lacks (gpu_serving.kubeconfig).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

import platform_matrix
import pulumi
from gpu_serving import kubeconfig, markers
from gpu_serving.analysis_names import TEMPLATES
from gpu_serving.fleet import Fleet, FleetError, load_fleet
from gpu_serving.quantity import parse_quantity
from monitoring import alerting

PROJECT = "gpu-serving"
PULUMI_DIR = Path(__file__).resolve().parents[1]
ALERTING_SOURCE = "monitoring/alertmanager.yml"


def receiver_secret_key(key: str) -> str:
    """The stack secret that holds the URL under `key` of the Secret alertmanager-receivers:
    page -> alertReceiverPage."""
    return f"alertReceiver{key[:1].upper()}{key[1:]}"


def alerting_config() -> dict[str, Any]:
    """monitoring/alertmanager.yml, checked; a ConfigError names its file and key."""
    try:
        return alerting.load(alerting.SOURCE)
    except alerting.AlertingError as exc:
        raise ConfigError(ALERTING_SOURCE, "", str(exc).removeprefix(f"{ALERTING_SOURCE}: ")) from exc


def secret_keys(alertmanager: Mapping[str, Any]) -> tuple[str, ...]:
    """The stack's secrets: Grafana's admin password and one per receiver URL of
    monitoring/alertmanager.yml (`alertmanager`, as alerting_config() read it)."""
    return ("grafanaAdminPassword", *map(receiver_secret_key, alerting.secret_keys(alertmanager)))


KEYS = (
    "fleetInventory",
    "kubernetes",
    "delivery",
    "gitRepoURL",
    "gitRevision",
    "triton",
    "modelRelease",
    "gateway",
    "driftAgent",
    "monitoring",
)
DELIVERIES = ("pulumi", "argocd")
MODEL_CONTROL_MODES = ("explicit", "none")
_REPOSITORY = re.compile(r"^(s3|gs|as)://\S+$")
_RETENTION = re.compile(r"^\d+(ms|s|m|h|d|w|y)$")
_DURATION = re.compile(r"^[1-9]\d*(s|m|h)$")
_RUNBOOK_URL = re.compile(r"^https?://[^\s#]+$")
_GIT_URL = re.compile(r"^(https://|ssh://|git@)\S+$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# An image repository: a registry host (with an optional port), then lower-case path segments.
_IMAGE_REPOSITORY = re.compile(r"^[a-z0-9.-]+(:\d+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+$")
_IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_IMAGE_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# A model release (scripts/release_model): an s3:// prefix named by the content hash.
_RELEASE_URI = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/\S+)?/sha256-[0-9a-f]{64}$")
IRSA_ANNOTATION = "eks.amazonaws.com/role-arn"
IMAGE_PATHS = {"gateway": "gpu-serving/gateway", "driftAgent": "gpu-serving/drift-agent"}
GPU_TAINT = "nvidia.com/gpu"


class ConfigError(ValueError):
    """Bad stack config; the message starts with the stack file and the full config key."""

    def __init__(self, source: str, key: str, reason: str) -> None:
        self.source = source
        self.key = f"{PROJECT}:{key}" if key else ""
        super().__init__(f"{source}: {self.key}: {reason}" if key else f"{source}: {reason}")


@dataclass(frozen=True)
class Kubernetes:
    """The cluster a stack deploys to (`gpu-serving:kubernetes`): the kubeconfig context, the
    name of the cluster it must point at, and the kubeconfig file (None: the provider's default,
    $KUBECONFIG or ~/.kube/config)."""

    context: str
    cluster: str
    kubeconfig: Path | None


@dataclass(frozen=True)
class Resources:
    requests: Mapping[str, str]
    limits: Mapping[str, str]


@dataclass(frozen=True)
class Step:
    """One step of the Rollout's canary: exactly one of the three is set."""

    set_weight: int | None = None
    analysis: tuple[str, ...] = ()  # AnalysisTemplate names (gpu_serving.analysis)
    pause: str | None = None  # a duration: 30s, 5m, 1h


@dataclass(frozen=True)
class Canary:
    """Argo Rollouts' canary steps for a new pod template (a new model or Triton release)."""

    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Triton:
    namespace: str
    gpus: int
    release: str
    image: str
    min_replicas: int
    max_replicas: int
    resources: Resources
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, str], ...]
    model_repository: str
    model_control_mode: str
    startup_budget_seconds: int
    queue_time_target_us: int
    service_account_annotations: Mapping[str, str]
    canary: Canary
    model_store_secret: str | None = None  # a Secret with the store's AWS_* variables (else IRSA)
    model_release: ModelRelease | None = None  # None: Triton reads model_repository itself


@dataclass(frozen=True)
class ModelRelease:
    """A published model release (`gpu-serving:modelRelease`, written by scripts/release_model)."""

    uri: str
    digest: str
    size_bytes: int


@dataclass(frozen=True)
class Image:
    """An image pinned in the stack file: a tag (not `latest`), a digest, or both."""

    repository: str
    tag: str | None
    digest: str | None

    @property
    def ref(self) -> str:
        tagged = f"{self.repository}:{self.tag}" if self.tag else self.repository
        return f"{tagged}@{self.digest}" if self.digest else tagged


@dataclass(frozen=True)
class Gateway:
    """The inference gateway (serving/gateway) in front of Triton, on CPU nodes."""

    image: Image
    min_replicas: int
    max_replicas: int
    cpu_target_percent: int
    resources: Resources


@dataclass(frozen=True)
class DriftAgent:
    """The drift agent (serving/drift): one replica that drains the gateway's samples."""

    image: Image
    resources: Resources


@dataclass(frozen=True)
class Monitoring:
    namespace: str
    retention: str
    prometheus_resources: Resources
    grafana_resources: Resources
    runbook_url: str  # monitoring/runbook.md as this environment's people browse it
    alertmanager: Mapping[str, Any]  # monitoring/alertmanager.yml, checked


@dataclass(frozen=True)
class ChartPin:
    name: str
    chart: str
    repository: str
    version: str


@dataclass(frozen=True)
class StackConfig:
    env: str
    source: str
    kubernetes: Kubernetes
    delivery: str
    git_repo_url: str
    git_revision: str
    kubernetes_version: str
    inventory: str
    fleet: Fleet
    triton: Triton
    gateway: Gateway
    drift_agent: DriftAgent
    monitoring: Monitoring
    charts: Mapping[str, ChartPin]

    def chart(self, name: str) -> ChartPin:
        return self.charts[name]


class _Reader:
    """Typed access to one level of the raw config, tracking the dotted key for messages."""

    def __init__(self, source: str, key: str, data: Any) -> None:
        self.source = source
        self.key = key
        if not isinstance(data, Mapping):
            self.fail(f"must be a mapping, got {data!r}")
        self.data: Mapping[str, Any] = data

    def only(self, *fields: str) -> _Reader:
        """Refuse fields this level does not know (a misspelt key would be ignored otherwise)."""
        for field in self.data:
            if field not in fields:
                self.fail(f"unknown field (known: {', '.join(fields)})", str(field))
        return self

    def fail(self, reason: str, field: str | None = None) -> None:
        key = f"{self.key}.{field}" if field and self.key else field or self.key
        raise ConfigError(self.source, key, reason)

    def _get(self, field: str, default: Any) -> Any:
        if field in self.data:
            return self.data[field]
        if default is _REQUIRED:
            self.fail("is required", field)
        return default

    def child(self, field: str) -> _Reader:
        value = self._get(field, _REQUIRED)
        return _Reader(self.source, f"{self.key}.{field}" if self.key else field, value)

    def integer(self, field: str, minimum: int, maximum: int | None = None, default: Any = None) -> int:
        value = self._get(field, _REQUIRED if default is None else default)
        bounds = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.fail(f"must be an integer {bounds}, got {value!r}", field)
        if maximum is not None and value > maximum:
            self.fail(f"must be an integer {bounds}, got {value!r}", field)
        return value

    def string(self, field: str, pattern: re.Pattern[str] | None = None, default: Any = None) -> str:
        value = self._get(field, _REQUIRED if default is None else default)
        if not isinstance(value, str) or not value:
            self.fail(f"must be a non-empty string, got {value!r}", field)
        if pattern is not None and not pattern.match(value):
            self.fail(f"{value!r} does not match {pattern.pattern}", field)
        return value

    def choice(self, field: str, choices: tuple[str, ...], default: Any = None) -> str:
        value = self._get(field, _REQUIRED if default is None else default)
        if value not in choices:
            self.fail(f"must be one of {', '.join(choices)}, got {value!r}", field)
        return value

    def labels(self, field: str) -> dict[str, str]:
        value = self._get(field, {})
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            self.fail(f'must be a mapping of strings to strings (quote "true"), got {value!r}', field)
        return dict(value)

    def tolerations(self, field: str) -> tuple[dict[str, str], ...]:
        value = self._get(field, [])
        allowed = {"key", "operator", "value", "effect", "tolerationSeconds"}
        if not isinstance(value, list):
            self.fail(f"must be a list of tolerations, got {value!r}", field)
        for index, item in enumerate(value):
            if not isinstance(item, Mapping) or not set(item) <= allowed or "key" not in item:
                self.fail(
                    f"must be a toleration with a key (fields: {', '.join(sorted(allowed))})", f"{field}[{index}]"
                )
        return tuple(dict(item) for item in value)

    def image(self, field: str, path: str) -> Image:
        """`{repository: <registry>/<path>, tag: ..., digest: sha256:...}`, pinned by a tag or a digest."""
        node = self.child(field).only("repository", "tag", "digest")
        repository = node.string("repository", _IMAGE_REPOSITORY)
        if not repository.endswith(f"/{path}"):
            node.fail(f"must be <registry>/{path}, got {repository!r}", "repository")
        tag = node.string("tag", _IMAGE_TAG) if "tag" in node.data else None
        digest = node.string("digest", _IMAGE_DIGEST) if "digest" in node.data else None
        if tag == "latest":
            node.fail("`latest` is not a pin: name a release tag or a digest", "tag")
        if tag is None and digest is None:
            node.fail("pin the image with a tag or a digest (sha256:...)")
        return Image(repository=repository, tag=tag, digest=digest)

    def resources(self, field: str) -> Resources:
        node = self.child(field).only("requests", "limits")
        requests, limits = node.child("requests"), node.child("limits")
        for name in ("cpu", "memory"):
            request, limit = requests.string(name), limits.string(name)
            try:
                too_much = parse_quantity(request) > parse_quantity(limit)
            except ValueError as exc:
                node.fail(str(exc), name)
            if too_much:
                node.fail(f"the {name} request {request} is above the limit {limit}", f"requests.{name}")
        return Resources(requests=dict(requests.data), limits=dict(limits.data))


_REQUIRED = object()


def _compatible(matrix: platform_matrix.Matrix, fleet: Fleet, reader: _Reader, field: str, release: str) -> str:
    """The release's image, once the matrix rules accept it on this fleet's driver and GPUs."""
    if release not in matrix.data["triton"]["releases"]:
        known = ", ".join(sorted(matrix.data["triton"]["releases"]))
        reader.fail(f"Triton {release!r} is not in the platform matrix (known: {known})", field)
    stack = platform_matrix.pinned_stack(
        matrix,
        triton_release=release,
        gpu_product=fleet.gpu_product or None,
        cuda_forward_compat=fleet.cuda_forward_compat,
    )
    problems = platform_matrix.check(matrix, stack)
    if problems:
        reader.fail(
            f"Triton {release} cannot run on this fleet ({fleet.path}): " + "; ".join(map(str, problems)), field
        )
    return matrix.triton_image(release)


TRITON_FIELDS = (
    "namespace",
    "gpus",
    "release",
    "replicas",
    "resources",
    "nodeSelector",
    "tolerations",
    "modelRepository",
    "modelControlMode",
    "startupBudgetSeconds",
    "queueTimeTargetMicroseconds",
    "serviceAccountAnnotations",
    "modelStoreSecret",
    "canary",
)


def _triton(reader: _Reader, fleet: Fleet, matrix: platform_matrix.Matrix, model_release: _Reader | None) -> Triton:
    reader.only(*TRITON_FIELDS)
    gpus = reader.integer("gpus", 0)
    if gpus > fleet.gpu_count:
        reader.fail(
            f"{gpus} GPUs per pod, but the nodes have {fleet.gpu_count} (gpu_fleet_gpu_count in {fleet.path})", "gpus"
        )
    replicas = reader.child("replicas").only("min", "max")
    minimum = replicas.integer("min", 1)
    maximum = replicas.integer("max", minimum)
    node_selector = reader.labels("nodeSelector")
    tolerations = reader.tolerations("tolerations")
    if gpus and not node_selector:
        reader.fail("GPU pods need a node selector for the GPU nodes", "nodeSelector")
    if gpus and not any(t["key"] == GPU_TAINT for t in tolerations):
        reader.fail(f"GPU pods need a toleration for the {GPU_TAINT} taint of the GPU nodes", "tolerations")
    release = reader.string("release", default=fleet.triton_release)
    model_repository = reader.string("modelRepository", _REPOSITORY)
    return Triton(
        namespace=reader.string("namespace", _NAME, default="triton"),
        gpus=gpus,
        release=release,
        image=_compatible(matrix, fleet, reader, "release", release),
        min_replicas=minimum,
        max_replicas=maximum,
        resources=reader.resources("resources"),
        node_selector=node_selector,
        tolerations=tolerations,
        model_repository=model_repository,
        model_control_mode=reader.choice("modelControlMode", MODEL_CONTROL_MODES),
        startup_budget_seconds=reader.integer("startupBudgetSeconds", 30, 3600),
        queue_time_target_us=reader.integer("queueTimeTargetMicroseconds", 1),
        service_account_annotations=reader.labels("serviceAccountAnnotations"),
        canary=_canary(reader.child("canary")),
        model_store_secret=_model_store_secret(reader, model_repository),
        model_release=_model_release(model_release, model_repository) if model_release else None,
    )


def _model_store_secret(reader: _Reader, model_repository: str) -> str | None:
    """Every environment that reads s3:// has credentials: a Secret, or an IRSA role (not both)."""
    secret = reader.string("modelStoreSecret", _NAME) if "modelStoreSecret" in reader.data else None
    irsa = IRSA_ANNOTATION in reader.labels("serviceAccountAnnotations")
    if secret and irsa:
        reader.fail(f"set a Secret or serviceAccountAnnotations.{IRSA_ANNOTATION}, not both", "modelStoreSecret")
    if model_repository.startswith("s3://") and not secret and not irsa:
        reader.fail(
            "Triton reads s3:// without credentials: name a Secret with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY "
            f"and AWS_DEFAULT_REGION here, or set serviceAccountAnnotations.{IRSA_ANNOTATION} (IRSA)",
            "modelStoreSecret",
        )
    return secret


def _model_release(reader: _Reader, model_repository: str) -> ModelRelease:
    reader.only("uri", "digest", "sizeBytes")
    digest = reader.string("digest", _IMAGE_DIGEST)
    uri = reader.string("uri", _RELEASE_URI)
    if not uri.endswith(f"/sha256-{digest.removeprefix('sha256:')}"):
        reader.fail(f"{uri!r} is not the prefix of release {digest} (.../sha256-<its hex>)", "uri")
    store = model_repository.rstrip("/")
    if not uri.startswith(f"{store}/"):
        reader.fail(f"{uri!r} is not under triton.modelRepository ({store}), this environment's release store", "uri")
    return ModelRelease(uri=uri, digest=digest, size_bytes=reader.integer("sizeBytes", 1))


STEP_KINDS = ("setWeight", "analysis", "pause")
# The static split's fields, gone with Argo Rollouts: say where their job went.
_RETIRED = {
    "weight": "the static split is gone: Argo Rollouts sets the canary weight step by step (steps)",
    "replicas": "the Rollout sizes the canary from each step's weight and the HPA's replicas",
    "release": "a new release is a new pod template: change triton.release and the Rollout canaries it",
    "modelRepository": "a new model is a new pod template: change triton.modelRepository",
}


def _step(reader: _Reader, index: int, item: Any, known_templates: tuple[str, ...]) -> Step:
    field = f"steps[{index}]"
    if not isinstance(item, Mapping) or len(item) != 1 or next(iter(item)) not in STEP_KINDS:
        shapes = "{setWeight: N}, {analysis: [template, ...]}, {pause: 5m}"
        reader.fail(f"must be one of {shapes}, got {item!r}", field)
    kind, value = next(iter(item.items()))
    if kind == "setWeight":
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 100:
            reader.fail(f"must be an integer between 1 and 100, got {value!r}", f"{field}.setWeight")
        return Step(set_weight=value)
    if kind == "pause":
        if not isinstance(value, str) or not _DURATION.match(value):
            reader.fail(f"must be a duration like 30s, 5m or 1h, got {value!r}", f"{field}.pause")
        return Step(pause=value)
    if not isinstance(value, list) or not value or len(set(map(str, value))) != len(value):
        reader.fail(f"must be a non-empty list of distinct AnalysisTemplate names, got {value!r}", f"{field}.analysis")
    unknown = [name for name in value if name not in known_templates]
    if unknown:
        known = ", ".join(known_templates)
        reader.fail(f"unknown AnalysisTemplate {unknown[0]!r} (known: {known})", f"{field}.analysis")
    return Step(analysis=tuple(value))


def _canary(reader: _Reader) -> Canary:
    """The steps, refused unless every weight below 100 is followed by an analysis before the
    next weight or the end (where Argo Rollouts sends 100%), and weights only grow."""
    for field in reader.data:
        if field in _RETIRED:
            reader.fail(_RETIRED[field], str(field))
    reader.only("steps")
    raw = reader._get("steps", _REQUIRED)
    if not isinstance(raw, list) or not raw:
        reader.fail(f"must be a non-empty list of steps, got {raw!r}", "steps")
    steps = tuple(_step(reader, index, item, TEMPLATES) for index, item in enumerate(raw))
    unchecked: int | None = None  # index of the last setWeight not yet followed by an analysis
    weight = 0
    for index, step in enumerate(steps):
        if step.set_weight is not None:
            if step.set_weight <= weight:
                reader.fail(f"setWeight {step.set_weight} does not grow from {weight}", f"steps[{index}].setWeight")
            if unchecked is not None:
                reader.fail(
                    f"setWeight {step.set_weight} follows setWeight {weight} (steps[{unchecked}]) with no analysis "
                    "step between them",
                    f"steps[{index}]",
                )
            weight, unchecked = step.set_weight, (index if step.set_weight < 100 else None)
        elif step.analysis:
            if weight == 0:
                reader.fail("an analysis before any setWeight measures a canary without traffic", f"steps[{index}]")
            unchecked = None
    if unchecked is not None:
        reader.fail(
            f"the steps end after setWeight {weight} (steps[{unchecked}]) with no analysis: Argo Rollouts would "
            "then send 100% to an unchecked canary",
            "steps",
        )
    return Canary(steps=steps)


def _gateway(reader: _Reader) -> Gateway:
    reader.only("image", "replicas", "cpuTargetPercent", "resources")
    replicas = reader.child("replicas").only("min", "max")
    minimum = replicas.integer("min", 1)
    return Gateway(
        image=reader.image("image", IMAGE_PATHS["gateway"]),
        min_replicas=minimum,
        max_replicas=replicas.integer("max", minimum),
        cpu_target_percent=reader.integer("cpuTargetPercent", 10, 100),
        resources=reader.resources("resources"),
    )


def _drift_agent(reader: _Reader) -> DriftAgent:
    reader.only("image", "resources")
    return DriftAgent(image=reader.image("image", IMAGE_PATHS["driftAgent"]), resources=reader.resources("resources"))


def _browsed_runbook(git_url: str, revision: str) -> str | None:
    """monitoring/runbook.md in the web view of an https git remote (GitHub's and GitLab's
    /blob/<revision>/ path); None for an ssh remote, which has no web address to derive."""
    if not git_url.startswith("https://"):
        return None
    return f"{git_url.removesuffix('.git')}/blob/{revision}/monitoring/runbook.md"


def _monitoring(reader: _Reader, git_url: str, revision: str, alertmanager: Mapping[str, Any]) -> Monitoring:
    reader.only("namespace", "retention", "prometheusResources", "grafanaResources", "runbookURL")
    derived = _browsed_runbook(git_url, revision)
    if derived is None and "runbookURL" not in reader.data:
        reader.fail("gitRepoURL is not an https URL: set the runbook's web address", "runbookURL")
    return Monitoring(
        namespace=reader.string("namespace", _NAME, default="monitoring"),
        retention=reader.string("retention", _RETENTION),
        prometheus_resources=reader.resources("prometheusResources"),
        grafana_resources=reader.resources("grafanaResources"),
        runbook_url=reader.string("runbookURL", _RUNBOOK_URL, default=derived),
        alertmanager=alertmanager,
    )


def _kubernetes(top: _Reader) -> Kubernetes:
    if "kubernetes" not in top.data:
        top.fail("is required: the kubeconfig context of the cluster this stack deploys to", "kubernetes.context")
    reader = top.child("kubernetes").only("context", "cluster", "kubeconfig")
    configured = reader.string("kubeconfig") if "kubeconfig" in reader.data else None
    # Relative to pulumi/, where `pulumi up` runs the program.
    path = PULUMI_DIR / Path(configured).expanduser() if configured else None
    return Kubernetes(context=reader.string("context"), cluster=reader.string("cluster"), kubeconfig=path)


def shown_path(path: Path) -> str:
    """A path as people find it: relative to the repository when inside it."""
    root = PULUMI_DIR.parent
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def _refuse_placeholders(top: _Reader) -> None:
    """Refuse every marker of scripts/new-environment left in the config or in the inventory it
    names, before any other check (a marker fails them with a less useful message)."""
    in_stack = list(markers.in_data(dict(top.data)))
    inventory = top.data.get("fleetInventory")
    in_inventory: list[tuple[Path, str, str]] = []
    if isinstance(inventory, str) and not markers.is_marker(inventory):
        in_inventory = list(markers.in_inventory((PULUMI_DIR / inventory).resolve()))
    every = [f"{top.source}: {PROJECT}:{key}" for key, _ in in_stack]
    every += [f"{shown_path(path)}: {key}" for path, key, _ in in_inventory]
    left = f"({len(every)} left: {'; '.join(every)})"
    if in_stack:
        key, value = in_stack[0]
        raise ConfigError(top.source, key, f"is a placeholder to fill, {value} {left}")
    if in_inventory:
        path, key, value = in_inventory[0]
        raise ConfigError(shown_path(path), "", f"{key}: is a placeholder to fill, {value} {left}")


def parse(raw: Mapping[str, Any], env: str, source: str, matrix: platform_matrix.Matrix | None = None) -> StackConfig:
    """Validate the raw config (keys without the project prefix) of stack `env`."""
    matrix = matrix or platform_matrix.load()
    alertmanager = alerting_config()
    top = _Reader(source, "", raw).only(*KEYS, *secret_keys(alertmanager))
    _refuse_placeholders(top)
    kubernetes = _kubernetes(top)
    inventory = top.string("fleetInventory")
    try:
        fleet = load_fleet((PULUMI_DIR / inventory).resolve())
    except FleetError as exc:
        top.fail(str(exc), "fleetInventory")
    charts = {
        name: ChartPin(name, entry.get("chart", name), entry["repository"], entry["version"])
        for name, entry in matrix.data["charts"].items()
    }
    git_repo_url, git_revision = top.string("gitRepoURL", _GIT_URL), top.string("gitRevision")
    return StackConfig(
        env=env,
        source=source,
        kubernetes=kubernetes,
        delivery=top.choice("delivery", DELIVERIES),
        git_repo_url=git_repo_url,
        git_revision=git_revision,
        kubernetes_version=matrix.kubernetes_version,
        inventory=Path(inventory).name,
        fleet=fleet,
        triton=_triton(
            top.child("triton"), fleet, matrix, top.child("modelRelease") if "modelRelease" in top.data else None
        ),
        gateway=_gateway(top.child("gateway")),
        drift_agent=_drift_agent(top.child("driftAgent")),
        monitoring=_monitoring(top.child("monitoring"), git_repo_url, git_revision, alertmanager),
        charts=charts,
    )


def stack_file(env: str) -> Path:
    return PULUMI_DIR / f"Pulumi.{env}.yaml"


def stack_names() -> list[str]:
    """Every environment with a stack file in pulumi/ (the examples and any new one), sorted."""
    return sorted(path.name.split(".")[1] for path in PULUMI_DIR.glob("Pulumi.*.yaml"))


def from_stack_file(env: str, path: Path | None = None) -> StackConfig:
    """The config of `pulumi/Pulumi.<env>.yaml` without the engine (render mode: no secrets read)."""
    path = path or stack_file(env)
    source = path.name
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ConfigError(source, "", f"cannot read the stack file: {exc.strerror}") from exc
    entries = document.get("config") if isinstance(document, Mapping) else None
    if not isinstance(entries, Mapping):
        raise ConfigError(source, "", "the stack file has no `config:` mapping")
    raw = {key.split(":", 1)[1]: value for key, value in entries.items() if key.startswith(f"{PROJECT}:")}
    cfg = parse(raw, env, source)
    for key in secret_keys(cfg.monitoring.alertmanager):
        if key in raw and not (isinstance(raw[key], Mapping) and "secure" in raw[key]):
            raise ConfigError(source, key, f"is a plaintext value; set it with `pulumi config set --secret {key}`")
    return cfg


OBJECT_KEYS = ("kubernetes", "triton", "modelRelease", "gateway", "driftAgent", "monitoring")


@dataclass(frozen=True)
class Secrets:
    grafana_admin_password: pulumi.Output[str]
    receiver_urls: Mapping[str, pulumi.Output[str]]  # key of the Secret alertmanager-receivers -> URL


def check_context(cfg: StackConfig, environ: Mapping[str, str]) -> None:
    """Refuse a kube context that the kubeconfig the provider will read lacks, or that points at
    another cluster than `kubernetes.cluster`."""
    kube = cfg.kubernetes
    try:
        kubeconfig.check(kube.context, kube.cluster, kubeconfig.files(kube.kubeconfig, environ))
    except kubeconfig.KubeconfigError as exc:
        raise ConfigError(cfg.source, f"kubernetes.{exc.field}", exc.reason) from exc


def from_pulumi() -> tuple[StackConfig, Secrets]:
    """The engine's config of the selected stack, checked against the kubeconfig, and its secrets
    (which must be Pulumi secrets)."""
    env = pulumi.get_stack()
    source = f"Pulumi.{env}.yaml"
    config = pulumi.Config(PROJECT)
    raw: dict[str, Any] = {}
    for key in KEYS:
        try:
            value = config.get_object(key) if key in OBJECT_KEYS else config.get(key)
        except pulumi.ConfigTypeError as exc:
            raise ConfigError(source, key, f"must be a YAML mapping: {exc}") from exc
        if value is not None:
            raw[key] = value
    cfg = parse(raw, env, source)
    check_context(cfg, os.environ)
    engine_secrets = set(pulumi.runtime.get_config_secret_keys_env())
    for key in secret_keys(cfg.monitoring.alertmanager):
        full_key = f"{PROJECT}:{key}"
        if pulumi.runtime.get_config(full_key) is None:
            raise ConfigError(source, key, f"is missing: set it with `pulumi config set --secret {key} -s {env}`")
        if not (pulumi.runtime.is_config_secret(full_key) or full_key in engine_secrets):
            raise ConfigError(source, key, f"is a plaintext value; set it with `pulumi config set --secret {key}`")
    keys = alerting.secret_keys(cfg.monitoring.alertmanager)
    receiver_urls = {key: config.require_secret(receiver_secret_key(key)) for key in keys}
    return cfg, Secrets(config.require_secret("grafanaAdminPassword"), receiver_urls)
