"""checkov on the rendered manifests: nothing fails, and every waiver sits on a node agent with a reason."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.k8s_addons.addon_render import ENVIRONMENTS, REPO_ROOT, objects
from tests.tools import missing_tool

CHECKOV = REPO_ROOT / ".venv-checkov" / "bin" / "checkov"


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_checkov_passes_with_only_reasoned_waivers(rendered_dirs, rendered, env):
    if not CHECKOV.exists():
        pytest.skip(missing_tool("checkov", "make .venv-checkov/.stamp; make test-offline builds it"))
    command = [str(CHECKOV), "-d", str(rendered_dirs[env]), "--framework", "kubernetes", "--compact"]
    result = subprocess.run(
        [*command, "--skip-download", "-o", "json"], capture_output=True, text=True, check=False, cwd=REPO_ROOT
    )
    report = json.loads(result.stdout)
    failed = [(c["check_id"], c["resource"]) for c in report["results"]["failed_checks"]]
    assert failed == [], f"checkov failed checks in {env}: {failed}"
    assert report["summary"]["parsing_errors"] == 0
    # checkov counts every object, plus one Pod per workload for its graph checks.
    assert report["summary"]["resource_count"] >= len(list(objects(rendered[env])))
    skipped = report["results"]["skipped_checks"]
    assert skipped, "the node agents carry waivers; none seen means checkov did not read them"
    for check in skipped:
        reason = check["check_result"].get("suppress_comment", "")
        assert check["resource"].startswith("DaemonSet."), check["resource"]
        assert reason and "\n" not in reason, f"{check['check_id']} on {check['resource']} has no one-line reason"
