"""Command-line options that fall back to environment variables, for the serving processes: a
container sets the variables, a person passes the options; `--help` names both and the default."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

Option = tuple[str, type, str]  # environment variable, type, help


def env_parser(
    prog: str, description: str, options: Mapping[str, Option], defaults: object, environ: Mapping[str, str]
) -> argparse.ArgumentParser:
    """A parser with `--<name>` for each option; its default is the environment variable when
    set (a bad value exits 2 naming the variable), else the attribute of `defaults`."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for name, (variable, kind, text) in options.items():
        fallback = getattr(defaults, name)
        default = fallback
        if variable in environ:
            try:
                default = kind(environ[variable])
            except ValueError:
                parser.error(f"{variable}={environ[variable]!r} is not a valid {kind.__name__}")
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            type=kind,
            default=default,
            help=f"{text} [env {variable}; default {fallback or 'none'}]",
        )
    return parser
