"""What a model release contains and its digest: the files Triton loads, hashed deterministically.

Triton treats every folder at the top of a repository as a model and, for a cloud repository
(`s3://`), localizes each model folder whole; files at the top (README.md) are ignored. A release
is therefore every regular file inside the top-level folders, and nothing else. Its digest is
the SHA-256 of one line per file, sorted by path: `<mode> <size> <sha256> <path>`, the mode as
git writes it (100755 when the owner may execute, else 100644), so neither the order in which
the file system lists entries, nor timestamps, owners or the umask change it, and any byte does.
"""

from __future__ import annotations

import hashlib
import re
import stat
from dataclasses import dataclass
from pathlib import Path

DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")
CHUNK = 1 << 20


class ContentError(ValueError):
    """The repository cannot be released as it is; the message names the path."""


@dataclass(frozen=True)
class ReleaseFile:
    path: str  # relative to the repository, with `/`
    mode: str  # "100644" or "100755"
    size: int
    sha256: str

    def line(self) -> str:
        return f"{self.mode} {self.size} {self.sha256} {self.path}\n"

    def as_dict(self) -> dict[str, object]:
        return {"path": self.path, "mode": self.mode, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class ReleaseContent:
    files: tuple[ReleaseFile, ...]

    @property
    def digest(self) -> str:
        text = "".join(entry.line() for entry in self.files)
        return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()

    @property
    def size_bytes(self) -> int:
        return sum(entry.size for entry in self.files)

    @property
    def prefix(self) -> str:
        """The name of the release in a store: `sha256-<hex>` (no colon in an S3 key or a path)."""
        return prefix_of(self.digest)


def prefix_of(digest: str) -> str:
    match = DIGEST.match(digest)
    if not match:
        raise ValueError(f"not a sha256 digest: {digest!r}")
    return f"sha256-{match.group(1)}"


def _sha256(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def _entry(repository: Path, path: Path) -> ReleaseFile:
    info = path.lstat()
    relative = path.relative_to(repository).as_posix()
    if stat.S_ISLNK(info.st_mode):
        raise ContentError(f"{path}: a symbolic link; an object store has none, release the file itself")
    if not stat.S_ISREG(info.st_mode):
        raise ContentError(f"{path}: not a regular file")
    mode = "100755" if info.st_mode & stat.S_IXUSR else "100644"
    return ReleaseFile(path=relative, mode=mode, size=info.st_size, sha256=_sha256(path))


def _walk(repository: Path, folder: Path) -> list[ReleaseFile]:
    entries: list[ReleaseFile] = []
    for path in folder.iterdir():
        if path.is_dir() and not path.is_symlink():
            entries += _walk(repository, path)
        else:
            entries.append(_entry(repository, path))
    return entries


def read_content(repository: Path) -> ReleaseContent:
    """The release of a model repository folder: every file of its model folders, sorted by path."""
    if not repository.is_dir():
        raise ContentError(f"{repository}: model repository folder not found")
    entries: list[ReleaseFile] = []
    for top in repository.iterdir():
        if top.is_symlink():
            raise ContentError(f"{top}: a symbolic link; an object store has none, release the folder itself")
        if top.is_dir():
            entries += _walk(repository, top)
    if not entries:
        raise ContentError(f"{repository}: no model folder with files in it")
    return ReleaseContent(files=tuple(sorted(entries, key=lambda entry: entry.path.encode("utf-8"))))
