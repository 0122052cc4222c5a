"""Bad input, offline: an invalid repository is refused before anything is published or
written; a stack file naming a release that was never published fails `verify`, naming the
file and field. Also the check that `make test` runs on the committed stack files."""

from __future__ import annotations

import json

import pytest

from serving.release.cli import main
from serving.release.content import read_content
from serving.release.index import INDEX_DIR, write_record
from serving.release.stack import KEY, Reference, release_uri, write_reference
from tests.release.conftest import ROOT, Workspace


def test_the_committed_stack_files_name_only_published_releases(capsys: pytest.CaptureFixture[str]) -> None:
    """`release_model verify` over pulumi/Pulumi.*.yaml and model_releases/, as committed."""
    assert main(["--pulumi-dir", str(ROOT / "pulumi"), "--index", str(INDEX_DIR), "verify"]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert all(f"Pulumi.{env}.yaml: ok" in out for env in ("dev", "staging", "prod"))


def test_an_invalid_repository_is_refused_with_the_validators_errors(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    config = workspace.repository / "text-classifier" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "text-classifier"', 'name: "text_classifier"'))
    before = workspace.snapshot()
    # No endpoint is reachable (port 9 on loopback): a publish attempt would fail loudly, not silently.
    status = main(
        [
            *workspace.args(),
            "publish",
            str(workspace.repository),
            "--env",
            "staging",
            "--endpoint-url",
            "http://127.0.0.1:9",
        ]
    )
    captured = capsys.readouterr()
    assert status == 1
    assert f"{config}" in captured.out and "text_classifier" in captured.out  # the validator's finding, with its file
    assert "refused" in captured.err and "nothing was published and no file was changed" in captured.err
    assert workspace.snapshot() == before


def test_a_dry_run_publishes_and_writes_nothing(workspace: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    before = workspace.snapshot()
    assert main([*workspace.args(), "publish", str(workspace.repository), "--env", "prod", "--dry-run"]) == 0
    digest = read_content(workspace.repository).digest
    assert f"release {digest}" in capsys.readouterr().out
    assert workspace.snapshot() == before


def _reference(workspace: Workspace, env: str) -> Reference:
    content = read_content(workspace.repository)
    store = f"s3://gpu-serving-models/{env}"
    return Reference(release_uri(store, content.digest), content.digest, content.size_bytes)


def test_a_release_never_published_is_refused_naming_file_and_field(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = _reference(workspace, "prod")
    write_reference(workspace.stack("prod"), reference)
    assert main([*workspace.args(), "verify", "--env", "prod"]) == 1
    err = capsys.readouterr().err
    assert f"{workspace.stack('prod')}: {KEY}.digest: {reference.digest} was never published" in err


def test_a_release_published_elsewhere_or_with_another_size_is_refused(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    content = read_content(workspace.repository)
    write_record(workspace.index, content, _reference(workspace, "staging").uri)  # published for staging only
    reference = _reference(workspace, "prod")
    write_reference(workspace.stack("prod"), reference)
    assert main([*workspace.args(), "verify", "--env", "prod", "--env", "staging"]) == 1
    err = capsys.readouterr().err
    assert f"{workspace.stack('prod')}: {KEY}.uri: {reference.uri} was never published" in err
    write_record(workspace.index, content, reference.uri)
    assert main([*workspace.args(), "verify", "--env", "prod"]) == 0
    write_reference(workspace.stack("prod"), Reference(reference.uri, reference.digest, reference.size_bytes + 1))
    assert main([*workspace.args(), "verify", "--env", "prod"]) == 1
    assert f"{KEY}.sizeBytes: {reference.size_bytes + 1}" in capsys.readouterr().err


def test_a_record_edited_by_hand_is_refused(workspace: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    content = read_content(workspace.repository)
    reference = _reference(workspace, "prod")
    record = write_record(workspace.index, content, reference.uri)
    write_reference(workspace.stack("prod"), reference)
    document = json.loads(record.read_text())
    document["files"][0]["sha256"] = "0" * 64
    record.write_text(json.dumps(document))
    assert main([*workspace.args(), "verify", "--env", "prod"]) == 1
    assert f"{record}: digest: is not the digest of the record's files" in capsys.readouterr().err


def test_a_release_outside_the_environments_store_is_refused(
    workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    content = read_content(workspace.repository)
    staging = _reference(workspace, "staging")
    write_record(workspace.index, content, staging.uri)
    write_reference(workspace.stack("prod"), staging)
    assert main([*workspace.args(), "verify", "--env", "prod"]) == 1
    assert f"{KEY}.uri: {staging.uri} is not under gpu-serving:triton.modelRepository" in capsys.readouterr().err
