"""The Pulumi program's package lives in pulumi/ (beside Pulumi.yaml), its policy rules in
pulumi/policy/ (beside PulumiPolicy.yaml), not at the repo root."""

import sys
from pathlib import Path

PULUMI_DIR = Path(__file__).resolve().parents[2] / "pulumi"
for folder in (PULUMI_DIR, PULUMI_DIR / "policy"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
