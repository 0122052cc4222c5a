"""The publication index in git: one record per published release, `model_releases/sha256-<hex>.json`.

`scripts/release_model publish` writes (or extends) the record only after the store holds every
object and the release manifest has been read back, so a record in git says: this content was
published, at these URIs. `verify` checks stack files against these records without the network.
Records are deterministic (no timestamps): git's history says when and by whom.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from serving.release.content import DIGEST, ReleaseContent, ReleaseFile, prefix_of

ROOT = Path(__file__).resolve().parents[2]
INDEX_DIR = ROOT / "model_releases"


class RecordError(ValueError):
    """A publication record is missing or malformed; the message names the file and field."""


@dataclass(frozen=True)
class Record:
    path: Path
    digest: str
    size_bytes: int
    files: tuple[ReleaseFile, ...]
    locations: tuple[str, ...]


def record_path(index: Path, digest: str) -> Path:
    return index / f"{prefix_of(digest)}.json"


def _fail(path: Path, field: str, reason: str) -> RecordError:
    return RecordError(f"{path}: {field}: {reason}")


def load_record(path: Path) -> Record:
    """A record, checked: its digest must be the digest of its own file list."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise RecordError(f"{path}: not a readable JSON publication record: {err}") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: a publication record must be a JSON object")
    digest = data.get("digest")
    if not isinstance(digest, str) or not DIGEST.match(digest):
        raise _fail(path, "digest", f"must be sha256:<64 hex>, got {digest!r}")
    try:
        files = tuple(
            ReleaseFile(path=str(f["path"]), mode=str(f["mode"]), size=int(f["size"]), sha256=str(f["sha256"]))
            for f in data.get("files", [])
        )
    except (KeyError, TypeError, ValueError) as err:
        raise _fail(path, "files", f"each entry needs path, mode, size, sha256 ({err})") from None
    if ReleaseContent(files).digest != digest:
        raise _fail(path, "digest", "is not the digest of the record's files (the record was edited by hand?)")
    size = data.get("sizeBytes")
    if size != ReleaseContent(files).size_bytes:
        raise _fail(path, "sizeBytes", f"is {size!r}, the files add up to {ReleaseContent(files).size_bytes}")
    locations = data.get("locations")
    if not isinstance(locations, list) or not locations or not all(isinstance(u, str) for u in locations):
        raise _fail(path, "locations", f"must be a non-empty list of URIs, got {locations!r}")
    if path.name != f"{prefix_of(digest)}.json":
        raise _fail(path, "digest", f"a record of {digest} must be named {prefix_of(digest)}.json")
    return Record(path=path, digest=digest, size_bytes=size, files=files, locations=tuple(locations))


def write_record(index: Path, content: ReleaseContent, uri: str) -> Path:
    """Record that `content` is published at `uri` (added to the locations of an existing record)."""
    path = record_path(index, content.digest)
    locations = set(load_record(path).locations) if path.exists() else set()
    document = {
        "digest": content.digest,
        "sizeBytes": content.size_bytes,
        "locations": sorted(locations | {uri}),
        "files": [entry.as_dict() for entry in content.files],
    }
    index.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    temporary.replace(path)
    return path
