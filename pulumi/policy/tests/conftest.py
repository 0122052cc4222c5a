"""The pack's modules sit beside PulumiPolicy.yaml, one folder up."""

import sys
from pathlib import Path

POLICY_DIR = Path(__file__).resolve().parents[1]
if str(POLICY_DIR) not in sys.path:
    sys.path.insert(0, str(POLICY_DIR))
