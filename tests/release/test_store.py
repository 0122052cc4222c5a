"""A real publish and verify against a local S3 server (moto's, on loopback, from .venv-s3):
the objects land under sha256-<hex>, the record and the stack reference follow, a second publish
changes nothing, and a tampered or unfinished release fails `verify --remote`."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from minio import Minio

from model_repo_check.tritonserver.processes import LOOPBACK, free_port
from serving.release.cli import main
from serving.release.content import read_content
from serving.release.index import record_path
from serving.release.stack import KEY, read_reference
from serving.release.store import MANIFEST, Location, client
from tests.release.conftest import Workspace
from tests.release.moto import CREDENTIALS, moto_s3

pytestmark = pytest.mark.serving_lab

BUCKET = "gpu-serving-models"


@pytest.fixture
def s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Minio]]:
    """moto's S3 server on a loopback port, with the bucket; stopped whatever the test does."""
    with moto_s3(tmp_path) as endpoint:
        for name, value in CREDENTIALS.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
        s3 = client(endpoint)
        s3.make_bucket(BUCKET)
        yield endpoint, s3


def _objects(s3: Minio, prefix: str) -> dict[str, bytes]:
    found = {}
    for obj in s3.list_objects(BUCKET, prefix=f"{prefix}/", recursive=True):
        response = s3.get_object(BUCKET, obj.object_name)
        try:
            found[obj.object_name[len(prefix) + 1 :]] = response.read()
        finally:
            response.close()
            response.release_conn()
    return found


def test_publish_then_verify_against_a_real_s3_server(
    s3: tuple[str, Minio], workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    _, minio = s3
    content = read_content(workspace.repository)
    stack = workspace.stack("staging")
    assert main([*workspace.args(), "publish", str(workspace.repository), "--env", "staging"]) == 0
    out = capsys.readouterr().out
    assert "published" in out and "already" not in out

    uri = f"s3://{BUCKET}/staging/{content.prefix}"
    objects = _objects(minio, Location.parse(uri).prefix)
    assert set(objects) == {entry.path for entry in content.files} | {MANIFEST}
    for entry in content.files:
        assert objects[entry.path] == (workspace.repository / entry.path).read_bytes()
    assert json.loads(objects[MANIFEST])["digest"] == content.digest

    record = json.loads(record_path(workspace.index, content.digest).read_text())
    assert record["locations"] == [uri] and record["sizeBytes"] == content.size_bytes
    reference = read_reference(stack)
    assert reference is not None and (reference.uri, reference.digest) == (uri, content.digest)

    assert main([*workspace.args(), "verify", "--env", "staging", "--remote"]) == 0
    assert f"{content.digest} at {uri}" in capsys.readouterr().out

    before = workspace.snapshot()
    assert main([*workspace.args(), "publish", str(workspace.repository), "--env", "staging"]) == 0
    assert "already published there" in capsys.readouterr().out
    assert workspace.snapshot() == before


def test_a_tampered_release_fails_remote_verify(
    s3: tuple[str, Minio], workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    _, minio = s3
    assert main([*workspace.args(), "publish", str(workspace.repository), "--env", "prod"]) == 0
    reference = read_reference(workspace.stack("prod"))
    assert reference is not None
    key = Location.parse(reference.uri).key("text-classifier/labels.txt")
    minio.put_object(BUCKET, key, io.BytesIO(b"tampered\n"), 9)
    capsys.readouterr()
    assert main([*workspace.args(), "verify", "--env", "prod", "--remote"]) == 1
    err = capsys.readouterr().err
    assert f"{workspace.stack('prod')}: {KEY}.uri: {reference.uri}: the objects hash to" in err


def test_an_unfinished_publish_is_not_a_release(
    s3: tuple[str, Minio], workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without release.json (written last) the prefix is not a release; a new publish completes it."""
    _, minio = s3
    assert main([*workspace.args(), "publish", str(workspace.repository), "--env", "dev"]) == 0
    reference = read_reference(workspace.stack("dev"))
    assert reference is not None
    minio.remove_object(BUCKET, Location.parse(reference.uri).key(MANIFEST))
    capsys.readouterr()
    assert main([*workspace.args(), "verify", "--env", "dev", "--remote"]) == 1
    assert f"{reference.uri}: no {MANIFEST}: never published there" in capsys.readouterr().err
    assert main([*workspace.args(), "publish", str(workspace.repository), "--env", "dev"]) == 0
    assert main([*workspace.args(), "verify", "--env", "dev", "--remote"]) == 0


def test_an_unreachable_store_changes_nothing(
    workspace: Workspace, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    before = workspace.snapshot()
    endpoint = f"http://{LOOPBACK}:{free_port()}"  # nothing listens there
    assert (
        main([*workspace.args(), "publish", str(workspace.repository), "--env", "prod", "--endpoint-url", endpoint])
        == 1
    )
    assert "nothing recorded, the stack file is unchanged" in capsys.readouterr().err
    assert workspace.snapshot() == before
