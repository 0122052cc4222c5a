"""serving/gateway mapping files against model_repository's config.pbtxt: every committed mapping
loads (so a broken one fails `make test`), and a broken mapping names its file and the tensor."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from serving.gateway.mapping import MappingError, load_mapping, load_mappings
from serving.gateway.settings import MAPPINGS

REPO = Path(__file__).resolve().parents[2]
MODEL_REPOSITORY = REPO / "model_repository"


def test_every_committed_mapping_fits_its_config() -> None:
    mappings = load_mappings(MAPPINGS, MODEL_REPOSITORY)
    assert {path.stem for path in MAPPINGS.glob("*.yml")} == set(mappings)
    assert {"text-classifier", "image-preprocess"} <= set(mappings)


def test_shapes_and_types_come_from_config_pbtxt() -> None:
    mappings = load_mappings(MAPPINGS, MODEL_REPOSITORY)
    text = mappings["text-classifier"]
    assert text.batched
    assert [(f.field, f.tensor.datatype, f.tensor.shape) for f in text.inputs] == [("embedding", "FP32", (32,))]
    labels = (MODEL_REPOSITORY / "text-classifier/labels.txt").read_text().split()
    assert {f.field: f.labels for f in text.outputs}["label"] == tuple(labels)
    assert text.feature_names == [f"embedding_{i}" for i in range(32)]
    image = mappings["image-preprocess"]
    assert not image.batched
    assert [(f.field, f.tensor.datatype, f.tensor.shape) for f in image.inputs] == [("image", "UINT8", (224, 224, 3))]
    assert image.feature_names == [f"image_{s}_{c}" for s in ("mean", "std") for c in "rgb"]


def _write(tmp_path: Path, text: str, name: str = "text-classifier.yml") -> Path:
    folder = tmp_path / "mappings"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def test_a_tensor_missing_from_config_names_the_file_and_tensor(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "model: text-classifier\n"
        "inputs:\n  embedding: {tensor: embeddings}\n"
        "outputs:\n  label: {tensor: probabilities, encoding: top_label}\n",
    )
    with pytest.raises(MappingError) as raised:
        load_mappings(path.parent, MODEL_REPOSITORY)
    message = str(raised.value)
    assert str(path) in message
    assert "inputs.embedding.tensor: input tensor 'embeddings' is not in" in message
    assert str(MODEL_REPOSITORY / "text-classifier/config.pbtxt") in message


def test_a_missing_output_tensor_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, "inputs:\n  embedding: {tensor: embedding}\noutputs:\n  score: {tensor: scores}\n")
    with pytest.raises(
        MappingError,
        match=r"outputs\.score\.tensor: output tensor 'scores' is not in .*\(outputs: logits, probabilities\)",
    ):
        load_mapping(path, MODEL_REPOSITORY)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("inputs: {}\noutputs:\n  l: {tensor: logits}\n", r"`inputs` must be a non-empty mapping"),
        (
            "inputs:\n  e: {tensor: embedding, encoding: csv}\noutputs:\n  l: {tensor: logits}\n",
            r"inputs\.e\.encoding: 'csv' is not one of list, base64",
        ),
        (
            "inputs:\n  e: {tensor: embedding}\noutputs:\n  l: {tensor: logits, encoding: top_label}\n",
            r"outputs\.l\.encoding: output 'logits' has no label_filename",
        ),
        (
            "inputs:\n  e: {tensor: embedding}\noutputs:\n  l: {tensor: logits}\n"
            "drift_features:\n  - {input: e, kind: channel_mean, channels: [a, b]}\n",
            r"drift_features\[0\]\.channels: name each of the 32 channels of axis -1",
        ),
        (
            "inputs:\n  e: {tensor: embedding}\noutputs:\n  l: {tensor: logits}\ndrift_features:\n  - {input: x}\n",
            r"drift_features\[0\]\.input: must name a business field of `inputs` \(e\)",
        ),
        ("inputs:\n  e: {tensor: embedding}\noutputs:\n  l: {tensor: logits}\nextra: 1\n", r"unknown keys \['extra'\]"),
        ("model: no-such-model\ninputs:\n  e: {tensor: embedding}\n", r"model 'no-such-model' has no .*config\.pbtxt"),
    ],
)
def test_bad_mappings_name_the_key(tmp_path: Path, body: str, expected: str) -> None:
    path = _write(tmp_path, body)
    with pytest.raises(MappingError, match=expected) as raised:
        load_mapping(path, MODEL_REPOSITORY)
    assert str(raised.value).startswith(str(path))


def test_an_input_tensor_nobody_feeds_is_named(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    shutil.copytree(MODEL_REPOSITORY / "text-classifier", repository / "text-classifier")
    config = repository / "text-classifier/config.pbtxt"
    config.write_text(
        config.read_text().replace(
            "input [\n", 'input [\n  {\n    name: "mask"\n    data_type: TYPE_FP32\n    dims: [32]\n  },\n', 1
        )
    )
    path = _write(tmp_path, "inputs:\n  e: {tensor: embedding}\noutputs:\n  l: {tensor: logits}\n")
    with pytest.raises(MappingError, match=r"no business field feeds input tensor\(s\) \['mask'\]"):
        load_mapping(path, repository)


def test_two_files_for_one_model_are_refused(tmp_path: Path) -> None:
    body = "model: text-classifier\ninputs:\n  e: {tensor: embedding}\noutputs:\n  l: {tensor: logits}\n"
    _write(tmp_path, body, "a.yml")
    path = _write(tmp_path, body, "b.yml")
    with pytest.raises(MappingError, match=r"b\.yml: model 'text-classifier' is mapped by .*a\.yml too"):
        load_mappings(path.parent, MODEL_REPOSITORY)
