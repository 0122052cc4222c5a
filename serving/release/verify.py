"""A stack file's release reference against the publication index (offline) and the store (--remote).

The index is the set of records in git (model_releases/); a record exists only when
`release_model publish` read the release back from the store, so a reference without a record,
or with a URI or size its record does not list, was never published as written.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from serving.release.index import RecordError, load_record, record_path
from serving.release.stack import KEY, REPOSITORY_FIELD, TRITON_KEY, StackError, read_reference, store_of

if TYPE_CHECKING:
    from serving.release.store import Store


def check_stack(stack: Path, index: Path, remote: Store | None = None) -> tuple[list[str], str]:
    """(problems, summary) of one stack file; each problem names the file and the field."""
    try:
        reference = read_reference(stack)
    except StackError as err:
        return [str(err)], "unreadable release reference"
    if reference is None:
        return [], f"no {KEY}: Triton reads {TRITON_KEY}.{REPOSITORY_FIELD} as before"
    problems: list[str] = []
    try:
        store = store_of(stack)
        if not reference.uri.startswith(f"{store}/"):
            problems.append(
                f"{stack}: {KEY}.uri: {reference.uri} is not under {TRITON_KEY}.{REPOSITORY_FIELD} ({store})"
            )
    except StackError as err:
        problems.append(str(err))
    path = record_path(index, reference.digest)
    if not path.exists():
        problems.append(
            f"{stack}: {KEY}.digest: {reference.digest} was never published: no publication record {path} "
            f"(publish it with scripts/release_model publish --env <env>)"
        )
        return problems, reference.digest
    try:
        record = load_record(path)
    except RecordError as err:
        return [*problems, str(err)], reference.digest
    if reference.uri not in record.locations:
        problems.append(
            f"{stack}: {KEY}.uri: {reference.uri} was never published: {path} lists {', '.join(record.locations)}"
        )
    if reference.size_bytes != record.size_bytes:
        problems.append(f"{stack}: {KEY}.sizeBytes: {reference.size_bytes}, but {path} records {record.size_bytes}")
    if remote is not None and not problems:
        from serving.release.store import StoreError

        try:
            remote.verify(reference.uri, reference.digest)
        except StoreError as err:
            problems.append(f"{stack}: {KEY}.uri: {err}")
    return problems, f"{reference.digest} at {reference.uri}"
