"""Mapping files: how a model's business JSON becomes its input tensors, and its output tensors
a business answer. Data types and shapes are never written in a mapping: they come from the
model's config.pbtxt (Triton's own schema, tritonclient's model_config_pb2), so the two cannot
disagree. Every problem raises MappingError naming the mapping file, the key and, for a tensor,
the config.pbtxt that lacks it.

    model: text-classifier            # the folder of model_repository/ (optional: the file's stem)
    inputs:                           # business field -> input tensor; every input must be fed
      embedding: {tensor: embedding, encoding: list}
    outputs:                          # business field -> output tensor
      label: {tensor: probabilities, encoding: top_label}
    drift_features:                   # one request -> a few named floats for the drift agent
      - {input: embedding, kind: elements}

Encodings: inputs `list` (nested JSON numbers shaped like the tensor) or `base64` (the tensor's
raw little-endian bytes); outputs `list`, `base64`, `labelled` ({label: value}, labels from the
output's label_filename) or `top_label` (the label of the largest value). Drift feature kinds:
`elements` (one feature per element, `<input>_<i>`), `channel_mean` and `channel_std` (one per
entry of `channels`, along `channel_axis`: `<input>_mean_<channel>`, `<input>_std_<channel>`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import triton_to_np_dtype

INPUT_ENCODINGS = ("list", "base64")
OUTPUT_ENCODINGS = ("list", "base64", "labelled", "top_label")
FEATURE_KINDS = ("elements", "channel_mean", "channel_std")
_TOP_KEYS = {"model", "inputs", "outputs", "drift_features"}


class MappingError(ValueError):
    """A mapping file that does not fit its model; the message names the file and the key."""


@dataclass(frozen=True)
class Tensor:
    name: str
    datatype: str  # Triton's wire name: FP32, UINT8, ...
    dtype: np.dtype[Any]
    shape: tuple[int, ...]  # one request's shape: without Triton's batch axis


@dataclass(frozen=True)
class InputField:
    field: str
    tensor: Tensor
    encoding: str


@dataclass(frozen=True)
class OutputField:
    field: str
    tensor: Tensor
    encoding: str
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class DriftFeature:
    input: str  # a business field of `inputs`
    kind: str
    names: tuple[str, ...]
    channel_axis: int = -1


@dataclass(frozen=True)
class ModelMapping:
    model: str
    source: Path
    batched: bool  # max_batch_size > 0: the request gets a batch axis of 1
    inputs: tuple[InputField, ...]
    outputs: tuple[OutputField, ...]
    drift_features: tuple[DriftFeature, ...]

    @property
    def feature_names(self) -> list[str]:
        return [name for feature in self.drift_features for name in feature.names]


def read_config(path: Path) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(path.read_text(encoding="utf-8"), config)
    except FileNotFoundError:
        raise MappingError(f"{path}: no such file") from None
    except text_format.ParseError as err:
        raise MappingError(f"{path}:{err.GetLine()}:{err.GetColumn()}: {err}") from None
    return config


def _tensor(io: Any, where: str) -> Tensor:
    datatype = model_config_pb2.DataType.Name(io.data_type).removeprefix("TYPE_")
    if datatype in ("STRING", "INVALID") or any(dim < 0 for dim in io.dims):
        raise MappingError(
            f"{where}: tensor {io.name!r} is {datatype} {list(io.dims)}: the gateway maps"
            " numeric tensors of fixed shape only"
        )
    return Tensor(io.name, datatype, np.dtype(triton_to_np_dtype(datatype)), tuple(io.dims))


def _table(document: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = document.get(key)
    if not isinstance(value, Mapping) or not value:
        raise MappingError(f"{where}: `{key}` must be a non-empty mapping of business field -> tensor")
    return value


def _entry(value: Any, where: str, encodings: tuple[str, ...]) -> tuple[str, str]:
    if not isinstance(value, Mapping) or set(value) - {"tensor", "encoding"} or "tensor" not in value:
        raise MappingError(f"{where}: write {{tensor: NAME, encoding: {'|'.join(encodings)}}}, got {value!r}")
    encoding = value.get("encoding", encodings[0])
    if encoding not in encodings:
        raise MappingError(f"{where}.encoding: {encoding!r} is not one of {', '.join(encodings)}")
    return str(value["tensor"]), encoding


def _lookup(tensors: Mapping[str, Tensor], name: str, kind: str, where: str, config: Path) -> Tensor:
    if name not in tensors:
        raise MappingError(
            f"{where}.tensor: {kind} tensor {name!r} is not in {config} ({kind}s: {', '.join(tensors) or 'none'})"
        )
    return tensors[name]


def _labels(io: Any, model_dir: Path, where: str) -> tuple[str, ...]:
    if not io.label_filename:
        raise MappingError(f"{where}.encoding: output {io.name!r} has no label_filename in its config.pbtxt")
    path = model_dir / io.label_filename
    if not path.is_file():
        raise MappingError(f"{where}.encoding: {path} (label_filename of {io.name!r}) does not exist")
    return tuple(line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def _features(document: Mapping[str, Any], inputs: Mapping[str, InputField], where: str) -> tuple[DriftFeature, ...]:
    features = []
    for index, spec in enumerate(document.get("drift_features") or []):
        at = f"{where}: drift_features[{index}]"
        if not isinstance(spec, Mapping) or spec.get("input") not in inputs:
            raise MappingError(f"{at}.input: must name a business field of `inputs` ({', '.join(inputs)})")
        field, kind = spec["input"], spec.get("kind")
        shape = inputs[field].tensor.shape
        if kind == "elements":
            names = tuple(f"{field}_{i}" for i in range(int(np.prod(shape))))
            features.append(DriftFeature(field, kind, names))
            continue
        if kind not in FEATURE_KINDS:
            raise MappingError(f"{at}.kind: {kind!r} is not one of {', '.join(FEATURE_KINDS)}")
        axis, channels = spec.get("channel_axis", -1), spec.get("channels")
        if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
            raise MappingError(f"{at}.channel_axis: {axis!r} is not an axis of {field}'s shape {list(shape)}")
        if not isinstance(channels, list) or len(channels) != shape[axis]:
            raise MappingError(f"{at}.channels: name each of the {shape[axis]} channels of axis {axis}")
        stat = kind.removeprefix("channel_")
        features.append(DriftFeature(field, kind, tuple(f"{field}_{stat}_{c}" for c in channels), axis))
    return tuple(features)


def load_mapping(path: Path, repository: Path) -> ModelMapping:
    """One mapping file, checked against model_repository/<model>/config.pbtxt."""
    where = str(path)
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise MappingError(f"{where}: not YAML: {err}") from None
    if not isinstance(document, Mapping):
        raise MappingError(f"{where}: not a mapping file (expected a YAML mapping with inputs and outputs)")
    if unknown := set(document) - _TOP_KEYS:
        raise MappingError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(_TOP_KEYS)})")
    model = str(document.get("model", path.stem))
    config_path = repository / model / "config.pbtxt"
    if not config_path.is_file():
        raise MappingError(f"{where}: model {model!r} has no {config_path}")
    config = read_config(config_path)
    declared_inputs = {io.name: io for io in config.input}
    declared_outputs = {io.name: io for io in config.output}
    input_tensors = {name: _tensor(io, f"{config_path}: input {name!r}") for name, io in declared_inputs.items()}
    output_tensors = {name: _tensor(io, f"{config_path}: output {name!r}") for name, io in declared_outputs.items()}

    inputs: dict[str, InputField] = {}
    for field, value in _table(document, "inputs", where).items():
        at = f"{where}: inputs.{field}"
        name, encoding = _entry(value, at, INPUT_ENCODINGS)
        inputs[field] = InputField(str(field), _lookup(input_tensors, name, "input", at, config_path), encoding)
    fed = {field.tensor.name for field in inputs.values()}
    if missing := [name for name, io in declared_inputs.items() if name not in fed and not io.optional]:
        raise MappingError(f"{where}: inputs: no business field feeds input tensor(s) {missing} of {config_path}")

    outputs = []
    for field, value in _table(document, "outputs", where).items():
        at = f"{where}: outputs.{field}"
        name, encoding = _entry(value, at, OUTPUT_ENCODINGS)
        tensor = _lookup(output_tensors, name, "output", at, config_path)
        labels = _labels(declared_outputs[name], config_path.parent, at) if "label" in encoding else ()
        if labels and len(labels) != int(np.prod(tensor.shape)):
            raise MappingError(f"{at}: {len(labels)} labels for {int(np.prod(tensor.shape))} values of {name!r}")
        outputs.append(OutputField(str(field), tensor, encoding, labels))

    return ModelMapping(
        model=model,
        source=path,
        batched=config.max_batch_size > 0,
        inputs=tuple(inputs.values()),
        outputs=tuple(outputs),
        drift_features=_features(document, inputs, where),
    )


def load_mappings(folder: Path, repository: Path) -> dict[str, ModelMapping]:
    """Every `<model>.yml` of a folder; two files for one model are an error."""
    found: dict[str, ModelMapping] = {}
    paths = sorted(folder.glob("*.yml"))
    if not paths:
        raise MappingError(f"{folder}: no mapping files (*.yml)")
    for path in paths:
        mapping = load_mapping(path, repository)
        if mapping.model in found:
            raise MappingError(f"{path}: model {mapping.model!r} is mapped by {found[mapping.model].source} too")
        found[mapping.model] = mapping
    return found
