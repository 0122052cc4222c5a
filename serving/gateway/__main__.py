"""python -m serving.gateway --triton-grpc HOST:PORT [--host H] [--port P] ...: load and check the
mappings, then serve the app with uvicorn (one process, one event loop)."""

from __future__ import annotations

import sys

import uvicorn

from serving.gateway.app import create_app
from serving.gateway.mapping import MappingError, load_mappings
from serving.gateway.settings import parse


def main() -> int:
    settings = parse()
    try:
        mappings = load_mappings(settings.mappings, settings.model_repository)
    except MappingError as err:
        print(f"gateway: {err}", file=sys.stderr)
        return 2
    app = create_app(settings, mappings)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,
        timeout_keep_alive=settings.keep_alive_s,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
