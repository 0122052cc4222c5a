"""`python -m monitoring build|check`.

build  write monitoring/generated/ (rules.yml, the pinned-version tests, the dashboards)
check  the generated files are current; promtool check rules and test rules; amtool
       check-config and the route tests. Each problem names its file and rule or route;
       exit 1 on any.
"""

from __future__ import annotations

import argparse
import sys

from monitoring import build, checks


def run_build() -> int:
    try:
        written = build.write(build.outputs())
    except build.BuildError as exc:
        print(f"monitoring build: the rules source is invalid:\n{exc}", file=sys.stderr)
        return 1
    from monitoring import dashboards  # its own helper's module, with its own dependencies

    written += dashboards.build(build.GENERATED / "dashboards")
    for path in written:
        print(f"wrote {checks.relative(path)}")
    return 0


def run_check() -> int:
    try:
        files = build.outputs()
    except build.BuildError as exc:
        problems = str(exc).splitlines()
    else:
        problems = checks.stale(files)
        # promtool reads what the source builds now, which is also the committed file unless stale.
        shown_as = f"{checks.relative(build.RULE_FILE)} (as built from monitoring/rules.py)"
        problems += checks.rule_text(files[build.RULE_FILE], shown_as)
        problems += checks.unit_tests(checks.unit_test_files())
    problems += checks.alertmanager_config()
    problems += checks.route_tests()
    from monitoring import dashboards

    problems += dashboards.check()
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"monitoring check: {len(problems)} problem(s)" if problems else "monitoring check: ok")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m monitoring", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("build", "check"))
    args = parser.parse_args(argv)
    return run_build() if args.command == "build" else run_check()


if __name__ == "__main__":
    sys.exit(main())
