"""The environment that Ansible runs against the lab with: this venv's tools, a chosen config.

The lab suite, the lab CLI test and the converge benchmark all start ansible-playbook this
way, each with a fact cache of its own so that one run's cached facts never leak into another.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PROJECT_CONFIG = REPO_ROOT / "ansible.cfg"


def ansible_env(fact_cache: Path, config: Path = PROJECT_CONFIG, **extra: str) -> dict[str, str]:
    """os.environ plus the running venv's bin on PATH, `config` and a private fact cache."""
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(config),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(fact_cache),
        "ANSIBLE_NOCOLOR": "1",
        **extra,
    }
