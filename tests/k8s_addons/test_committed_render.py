"""deploy/addons/<env> is what the playbook renders now (make render-addons), and a second render changes nothing."""

from __future__ import annotations

import re
import shutil

import pytest

from tests.k8s_addons.addon_render import ENVIRONMENTS, REPO_ROOT, run_playbook

DEPLOY = REPO_ROOT / "deploy" / "addons"


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_committed_manifests_equal_a_fresh_render(rendered_dirs, env):
    committed = {p.name: p.read_text(encoding="utf-8") for p in sorted((DEPLOY / env).glob("*.yaml"))}
    fresh = {p.name: p.read_text(encoding="utf-8") for p in sorted(rendered_dirs[env].glob("*.yaml"))}
    fix = f"make render-addons INVENTORY=inventories/{env}"
    assert sorted(committed) == sorted(fresh), f"deploy/addons/{env} has other files than a render: {fix}"
    for name, text in fresh.items():
        assert committed[name] == text, f"deploy/addons/{env}/{name} is stale: {fix}"


def test_a_second_render_changes_nothing(rendered_dirs, tmp_path):
    target = tmp_path / "prod"
    shutil.copytree(rendered_dirs["prod"], target)
    result = run_playbook("prod", {"k8s_addons_render_dir": str(target)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"localhost\s+: ok=\d+\s+changed=0\s", result.stdout), result.stdout
