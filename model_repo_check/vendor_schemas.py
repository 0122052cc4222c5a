"""`make model-schemas`: vendor the model_config.proto of every Triton release in the platform matrix.

For each `triton.releases.<release>.server_version` of platform_matrix/matrix.yml: pip downloads
the tritonclient wheel of that version (--no-deps, into .cache/tritonclient-wheels), takes only
`tritonclient/grpc/model_config_pb2.py` out of it and writes it, unchanged, to
model_repo_check/schemas/<release>/. Prints each wheel's and file's sha256 for schemas/README.md.
Needs PyPI; the validator and its tests do not (the files are committed).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

from model_repo_check.release_schema import PB2_FILE, SCHEMAS, matrix_releases

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache/tritonclient-wheels"
MEMBER = "tritonclient/grpc/model_config_pb2.py"


def wheel(version: str) -> Path:
    found = sorted(CACHE.glob(f"tritonclient-{version}-*.whl"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(CACHE), f"tritonclient=={version}"],
            check=True,
        )
        found = sorted(CACHE.glob(f"tritonclient-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip download left no tritonclient-{version} wheel in {CACHE}")
    return found[0]


def extract(path: Path) -> bytes:
    """The pb2 module, wherever the wheel keeps it (purelib data folder or top level)."""
    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist() if n == MEMBER or n.endswith(f".data/purelib/{MEMBER}")]
        if len(names) != 1:
            raise SystemExit(f"{path}: expected one {MEMBER}, found {names}")
        return archive.read(names[0])


def main() -> int:
    CACHE.mkdir(parents=True, exist_ok=True)
    for release, version in matrix_releases().items():
        source = wheel(version)
        data = extract(source)
        target = SCHEMAS / release / PB2_FILE
        target.parent.mkdir(parents=True, exist_ok=True)
        changed = not target.is_file() or target.read_bytes() != data
        target.write_bytes(data)
        wheel_sha = hashlib.sha256(source.read_bytes()).hexdigest()
        print(
            f"{release}: tritonclient {version}: wheel {source.name} sha256 {wheel_sha}; "
            f"{target.relative_to(ROOT)} sha256 {hashlib.sha256(data).hexdigest()}{' (written)' if changed else ''}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
