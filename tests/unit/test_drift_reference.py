"""The drift agent's reference windows: the committed ones are current (the seeded build gives
the same files) and name the gateway mappings' drift features; a broken file names the file,
line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.drift.build_reference import REPOSITORY, UNSHIFTED, write_reference
from serving.drift.reference import REFERENCE_FILE, ReferenceError, load_reference, load_references
from serving.gateway.mapping import load_mappings
from serving.gateway.settings import MAPPINGS


def test_every_mapped_model_ships_a_reference_window_with_its_drift_features() -> None:
    mappings = load_mappings(MAPPINGS, REPOSITORY)
    references = load_references(REPOSITORY)
    assert set(references) == {model for model, mapping in mappings.items() if mapping.feature_names}
    for model, reference in references.items():
        assert list(reference.names) == mappings[model].feature_names, reference.path
        assert len(reference.rows) == 1000


@pytest.mark.parametrize("model", sorted(UNSHIFTED))
def test_the_committed_reference_window_is_what_the_seeded_build_writes(model: str, tmp_path: Path) -> None:
    mapping = load_mappings(MAPPINGS, REPOSITORY)[model]
    target = tmp_path / REFERENCE_FILE
    write_reference(mapping, target)
    committed = REPOSITORY / model / REFERENCE_FILE
    assert target.read_bytes() == committed.read_bytes(), (
        f"{committed} is stale: run `.venv/bin/python -m serving.drift.build_reference`"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", ":1: no header (the drift feature names)"),
        ("a,,b\n1,2,3\n", ":1: an empty column name in the header"),
        ("a,b,a\n1,2,3\n", ":1: columns named twice: a"),
        ("a,b\n", ": no rows below the header"),
        ("a,b\n1,2\n3\n", ":3: 1 values, the header names 2 columns"),
        ("a,b\n1,2\n3,x\n", ":3: column 'b': 'x' is not a number"),
        ("a,b\n1,inf\n", ":2: column 'b': 'inf' is not finite"),
        ("a,b\nnan,1\n", ":2: column 'a': 'nan' is not finite"),
    ],
)
def test_a_broken_reference_names_file_line_and_column(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "m" / REFERENCE_FILE
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(ReferenceError) as error:
        load_reference(path)
    assert str(error.value) == f"{path}{message}"


def test_a_repository_without_reference_windows_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ReferenceError, match=f"no model folder has a {REFERENCE_FILE}"):
        load_references(tmp_path)


def test_the_model_is_the_folder_and_values_are_floats(tmp_path: Path) -> None:
    path = tmp_path / "text-classifier" / REFERENCE_FILE
    path.parent.mkdir()
    path.write_text("x,y\n1,2.5\n-3e-2,4\n")
    reference = load_references(tmp_path)["text-classifier"]
    assert (reference.model, reference.names, reference.rows) == (
        "text-classifier",
        ("x", "y"),
        ((1.0, 2.5), (-0.03, 4.0)),
    )
