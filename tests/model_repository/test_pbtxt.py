"""FieldLocations: every field that parsed can be pointed at, in any text-format style."""

from pathlib import Path

import pytest
from google.protobuf import text_format
from google.protobuf.message import Message

from model_repo_check.pbtxt import FieldLocations, ModelConfig

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "model_repository").glob("*/config.pbtxt"))


def field_paths(message: Message, prefix: tuple = ()):
    """(path, field name) for every set field, messages and repeated elements included."""
    for field, value in message.ListFields():
        if field.message_type and field.message_type.GetOptions().map_entry:
            yield (*prefix, field.name), field.name
        elif field.is_repeated and field.message_type:
            for i, element in enumerate(value):
                yield (*prefix, field.name, i), field.name
                yield from field_paths(element, (*prefix, field.name, i))
        elif field.message_type:
            yield (*prefix, field.name), field.name
            yield from field_paths(value, (*prefix, field.name))
        else:
            yield (*prefix, field.name), field.name


def render(style: str, config: Message, original: str) -> str:
    if style == "as-written":
        return original
    return text_format.MessageToString(config, as_one_line=style == "one-line", use_short_repeated_primitives=True)


@pytest.mark.parametrize("style", ["as-written", "printer", "one-line"])
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_every_parsed_field_is_located(path, style):
    config = text_format.Parse(path.read_text(), ModelConfig())
    text = render(style, config, path.read_text())
    locations = FieldLocations.index(path, text)
    lines = text.splitlines()
    paths = list(field_paths(config))
    assert len(paths) > 15
    for parts, name in paths:
        found = locations.find(*parts)
        assert found.line is not None, parts
        assert lines[found.line - 1][found.column - 1 :].startswith(name), (parts, found)
