"""Send node_facts.py and gpu_health/probe.py to a node as one self-contained command.

The node needs only python3: both modules are shipped as source inside the command line
(base64), loaded as modules there, and the result comes back as one JSON document on stdout.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import gpu_health.probe
from tests.compliance import node_facts

_BOOTSTRAP = """
import json, sys, types
def load(name, source):
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, name, "exec"), module.__dict__)
    return module
probe = load("gpu_health_probe", PROBE) if WITH_NVML else None
facts = load("node_facts", FACTS)
print(json.dumps(facts.collect(SPEC, probe)))
"""


def _source(module: Any) -> str:
    return Path(module.__file__).read_text(encoding="utf-8")


def command(spec: dict[str, Any], *, with_nvml: bool) -> str:
    """A shell command that prints the node's facts as JSON (NVML read on the node if with_nvml)."""
    program = (
        f"import json\nPROBE = {_source(gpu_health.probe)!r}\nFACTS = {_source(node_facts)!r}\n"
        f"SPEC = json.loads({json.dumps(spec)!r})\nWITH_NVML = {with_nvml!r}\n" + _BOOTSTRAP
    )
    encoded = base64.b64encode(program.encode()).decode()
    return f"python3 -c 'import base64; exec(base64.b64decode(\"{encoded}\"))'"
