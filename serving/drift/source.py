"""The gateway's sample endpoint: `GET <gateway>/v1/samples/<model>?limit=N` answers
`{"model": m, "features": [names...], "rows": [[float, ...], ...]}`, draining up to N rows."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any


class SampleSourceError(RuntimeError):
    pass


@dataclass(frozen=True)
class Samples:
    names: list[str]
    rows: list[list[float]]


def _checked(url: str, model: str, body: Any) -> Samples:
    if not isinstance(body, dict) or body.get("model") != model:
        raise SampleSourceError(f"GET {url}: the answer is not the samples of {model!r}: {str(body)[:200]}")
    names, rows = body.get("features"), body.get("rows")
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise SampleSourceError(f"GET {url}: `features` is not a list of names")
    if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
        raise SampleSourceError(f"GET {url}: `rows` is not a list of lists")
    return Samples(names, rows)


def pull(gateway: str, model: str, limit: int, timeout: float) -> Samples:
    url = f"{gateway}/v1/samples/{urllib.parse.quote(model, safe='')}?limit={limit}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = json.load(response)
    except urllib.error.HTTPError as err:
        raise SampleSourceError(f"GET {url} answered {err.code}: {err.read().decode(errors='replace')[:200]}") from None
    except (urllib.error.URLError, OSError) as err:
        raise SampleSourceError(f"GET {url} failed: {getattr(err, 'reason', err)}") from None
    except json.JSONDecodeError as err:
        raise SampleSourceError(f"GET {url}: the answer is not JSON: {err}") from None
    return _checked(url, model, body)
