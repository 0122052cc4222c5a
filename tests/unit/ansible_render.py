"""What Ansible's own templating makes of an expression, for tests that check role variables.

`ansible localhost -m debug` with the role files and overrides as extra vars: the same Jinja,
filters (this repository's included, through ansible.cfg) and precedence a play would use.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def ansible_renders(expression: str, files: list[Path], variables: dict[str, Any]) -> Any:
    """`{{ expression }}` over `files` (each -e @file, in order) and then `variables`, as JSON."""
    extra = [arg for path in files for arg in ("-e", f"@{path}")]
    extra += ["-e", json.dumps(variables)]
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"),
            *("localhost", "-i", "localhost,", "-c", "local", "-o"),
            *("-m", "ansible.builtin.debug", "-a", "msg={{ " + expression + " | to_json }}"),
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "HOME": str(Path.home()),
            "ANSIBLE_NOCOLOR": "1",
        },
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads(done.stdout.split(" => ", 1)[1])["msg"]
    return json.loads(answer) if isinstance(answer, str) else answer
