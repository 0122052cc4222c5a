"""The model_config.proto of each Triton release in the platform matrix, side by side.

`model_repo_check/schemas/<release>/model_config_pb2.py` is the generated module from the
tritonclient wheel of that release's server version (`triton.releases.<release>.server_version`
in platform_matrix/matrix.yml; schemas/README.md says where each file came from). Those modules
are not imported: each registers `model_config.proto` of package `inference` in protobuf's
default pool, where the installed tritonclient (a newer release) has already registered its
own. Instead the serialized FileDescriptorProto is read out of the module's source (the bytes
given to `AddSerializedFile`) and built into a DescriptorPool of its own, one per release.

A config is parsed with its release's `ModelConfig`, so a field that release does not know
is a parse error naming the release. The parsed message then goes, by its wire format, into
the installed tritonclient's `ModelConfig`, the class the rules are written against: every
release's fields have the same numbers and types there (tests/model_repository/test_release_schema.py).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import descriptor, descriptor_pb2, descriptor_pool, message, message_factory

import platform_matrix
from platform_matrix.matrix import version_tuple

SCHEMAS = Path(__file__).resolve().parent / "schemas"
PB2_FILE = "model_config_pb2.py"


class ReleaseSchemaError(ValueError):
    """A release the matrix does not list, or one whose model_config.proto is not vendored."""


@dataclass(frozen=True)
class ReleaseSchema:
    """One release's model_config.proto: its `inference.ModelConfig` class in a pool of its own."""

    release: str
    server_version: str
    file: descriptor.FileDescriptor
    model_config: type[message.Message]

    @property
    def label(self) -> str:
        """How messages name it: `Triton 24.05 (tritonclient 2.46.0)`."""
        return f"Triton {self.release} (tritonclient {self.server_version})"

    def message_descriptor(self, full_name: str) -> descriptor.Descriptor | None:
        try:
            return self.file.pool.FindMessageTypeByName(full_name)
        except KeyError:
            return None

    def enum_descriptor(self, full_name: str) -> descriptor.EnumDescriptor | None:
        try:
            return self.file.pool.FindEnumTypeByName(full_name)
        except KeyError:
            return None


def matrix_releases() -> dict[str, str]:
    """release -> server version, oldest first, as the platform matrix lists them."""
    releases = platform_matrix.load().data["triton"]["releases"]
    return {name: releases[name]["server_version"] for name in sorted(releases, key=version_tuple)}


def newest_release() -> str:
    return list(matrix_releases())[-1]


def serialized_file(pb2_source: Path) -> bytes:
    """The FileDescriptorProto that a protoc-generated module hands to AddSerializedFile."""
    tree = ast.parse(pb2_source.read_text(encoding="utf-8"), str(pb2_source))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, bytes)
        ):
            return node.args[0].value
    raise ReleaseSchemaError(f"{pb2_source}: no AddSerializedFile(b'...') call: not a protoc-generated module")


@functools.cache
def load_schema(release: str) -> ReleaseSchema:
    """The schema of `release` (a key of triton.releases), built once per process."""
    releases = matrix_releases()
    if release not in releases:
        raise ReleaseSchemaError(
            f"Triton release {release!r} is not in platform_matrix/matrix.yml (known: {', '.join(releases)})"
        )
    source = SCHEMAS / release / PB2_FILE
    if not source.is_file():
        raise ReleaseSchemaError(
            f"{source}: model_config.proto of Triton {release} is missing: extract it from the tritonclient "
            f"{releases[release]} wheel (model_repo_check/schemas/README.md)"
        )
    proto = descriptor_pb2.FileDescriptorProto.FromString(serialized_file(source))
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(proto.SerializeToString())
    file = pool.FindFileByName(proto.name)
    model_config = message_factory.GetMessageClass(pool.FindMessageTypeByName("inference.ModelConfig"))
    return ReleaseSchema(release, releases[release], file, model_config)


def first_release_with(message_name: str, field_name: str, after: str) -> ReleaseSchema | None:
    """The oldest release newer than `after` whose message `message_name` has `field_name`."""
    releases = list(matrix_releases())
    for release in releases[releases.index(after) + 1 :]:
        schema = load_schema(release)
        found = schema.message_descriptor(message_name)
        if found is not None and field_name in found.fields_by_name:
            return schema
    return None
