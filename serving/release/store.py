"""The release store: an S3 prefix named by the release's content hash, `<store>/sha256-<hex>/`.

Layout: the model folders exactly as in the repository (what Triton's `--model-repository`
reads and localizes), then `release.json` (digest, size, and every file's path, mode, size and
SHA-256), written last: a prefix without it is an interrupted publish, not a release. Every
upload is hashed while it streams and compared with the digest's entry, so a file that changed
after hashing fails the publish instead of landing under the wrong name. The client is MinIO's
S3 SDK (any S3 API: AWS, MinIO, the moto server of the tests); credentials come from the AWS
environment variables, ~/.aws/credentials, or the instance's or pod's IAM role, in that order.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from minio import Minio
from minio.credentials.providers import AWSConfigProvider, ChainedProvider, EnvAWSProvider, IamAwsProvider
from minio.error import MinioException, S3Error
from urllib3.exceptions import HTTPError

from serving.release.content import CHUNK, ReleaseContent, ReleaseFile

MANIFEST = "release.json"
DEFAULT_ENDPOINT = "https://s3.amazonaws.com"


class StoreError(RuntimeError):
    """The store refused or failed an operation; the message names the URI."""


@dataclass(frozen=True)
class Location:
    bucket: str
    prefix: str  # without a trailing slash

    @classmethod
    def parse(cls, uri: str) -> Location:
        parts = urlsplit(uri)
        if parts.scheme != "s3" or not parts.netloc or not parts.path.strip("/"):
            raise StoreError(f"{uri}: not an s3://<bucket>/<prefix> URI")
        return cls(bucket=parts.netloc, prefix=parts.path.strip("/"))

    def key(self, path: str) -> str:
        return f"{self.prefix}/{path}"


class _HashingReader:
    """A file read for upload, hashed on the way out."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.hasher = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.hasher.update(data)
        return data


def manifest(content: ReleaseContent) -> bytes:
    document = {
        "digest": content.digest,
        "sizeBytes": content.size_bytes,
        "files": [entry.as_dict() for entry in content.files],
    }
    return (json.dumps(document, indent=2) + "\n").encode("utf-8")


def client(endpoint_url: str | None = None) -> Minio:
    """An S3 client: `endpoint_url`, else $AWS_ENDPOINT_URL_S3 or $AWS_ENDPOINT_URL, else AWS."""
    url = (
        endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or DEFAULT_ENDPOINT
    )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise StoreError(f"{url}: the S3 endpoint must be an http:// or https:// URL")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    credentials = ChainedProvider([EnvAWSProvider(), AWSConfigProvider(), IamAwsProvider()])
    return Minio(parts.netloc, secure=parts.scheme == "https", region=region, credentials=credentials)


@contextmanager
def _errors(uri: str) -> Iterator[None]:
    try:
        yield
    except S3Error as err:
        raise StoreError(f"{uri}: {err.code}: {err.message}") from None
    except (MinioException, HTTPError, OSError, ValueError) as err:
        raise StoreError(f"{uri}: {err}") from None


class Store:
    def __init__(self, s3: Minio) -> None:
        self.s3 = s3

    def _manifest(self, location: Location) -> dict[str, Any] | None:
        try:
            response = self.s3.get_object(location.bucket, location.key(MANIFEST))
        except S3Error as err:
            if err.code == "NoSuchKey":
                return None
            raise
        try:
            return json.loads(response.read())
        finally:
            response.close()
            response.release_conn()

    def _listing(self, location: Location) -> dict[str, int]:
        objects = self.s3.list_objects(location.bucket, prefix=f"{location.prefix}/", recursive=True)
        return {obj.object_name[len(location.prefix) + 1 :]: obj.size or 0 for obj in objects if obj.object_name}

    def _upload(self, location: Location, repository: Path, entry: ReleaseFile) -> None:
        with (repository / entry.path).open("rb") as handle:
            reader = _HashingReader(handle)
            self.s3.put_object(
                location.bucket, location.key(entry.path), reader, entry.size, metadata={"sha256": entry.sha256}
            )
        if reader.hasher.hexdigest() != entry.sha256:
            raise StoreError(f"{repository / entry.path}: changed while it was published; run the release again")

    def publish(self, content: ReleaseContent, repository: Path, uri: str) -> bool:
        """Upload the release to `uri`; False when the store already holds exactly this release."""
        location = Location.parse(uri)
        expected = {entry.path: entry.size for entry in content.files}
        with _errors(uri):
            existing = self._manifest(location)
            if existing is not None:
                if existing.get("digest") != content.digest:
                    raise StoreError(f"{uri}: holds release {existing.get('digest')}, not {content.digest}")
                self._check_listing(uri, location, expected)
                return False
            for entry in content.files:
                self._upload(location, repository, entry)
            self._check_listing(uri, location, expected, manifest_written=False)
            body = manifest(content)
            self.s3.put_object(location.bucket, location.key(MANIFEST), io.BytesIO(body), len(body), "application/json")
            written = self._manifest(location)
        if written is None or written.get("digest") != content.digest:
            raise StoreError(f"{uri}: {MANIFEST} did not read back as release {content.digest}")
        return True

    def _check_listing(
        self, uri: str, location: Location, expected: dict[str, int], manifest_written: bool = True
    ) -> None:
        listed = self._listing(location)
        if manifest_written:
            listed.pop(MANIFEST, None)
        if listed != expected:
            extra = sorted(set(listed) - set(expected))
            missing = sorted(set(expected) - set(listed))
            resized = sorted(p for p in set(listed) & set(expected) if listed[p] != expected[p])
            raise StoreError(
                f"{uri}: the store's objects differ from the release: "
                f"extra {extra}, missing {missing}, size differs {resized}"
            )

    def verify(self, uri: str, digest: str) -> ReleaseContent:
        """Download every object of the release at `uri` and hash it again: the content must be `digest`."""
        location = Location.parse(uri)
        with _errors(uri):
            document = self._manifest(location)
            if document is None:
                raise StoreError(f"{uri}: no {MANIFEST}: never published there, or the publish did not finish")
            listed = self._listing(location)
            listed.pop(MANIFEST, None)
            modes = {str(f["path"]): str(f["mode"]) for f in document.get("files", [])}
            if set(listed) != set(modes):
                raise StoreError(f"{uri}: the objects under the prefix are not the files {MANIFEST} lists")
            files = tuple(self._hashed(location, path, modes[path]) for path in sorted(listed, key=str.encode))
        content = ReleaseContent(files)
        if content.digest != digest or document.get("digest") != digest:
            raise StoreError(f"{uri}: the objects hash to {content.digest}, the release is {digest}")
        return content

    def _hashed(self, location: Location, path: str, mode: str) -> ReleaseFile:
        response = self.s3.get_object(location.bucket, location.key(path))
        hasher, size = hashlib.sha256(), 0
        try:
            for chunk in response.stream(CHUNK):
                hasher.update(chunk)
                size += len(chunk)
        finally:
            response.close()
            response.release_conn()
        return ReleaseFile(path=path, mode=mode, size=size, sha256=hasher.hexdigest())
