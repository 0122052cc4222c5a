"""containerd's nvidia runtime through a drop-in (roles/nvidia_container_toolkit, plugins/filter/containerd_config.py).

The plan on the main file as Debian's package ships it and as sites change it, bad main files
named, the role's own settings as Ansible renders them, and containerd 1.6 itself (Debian 12's
binary, unpacked by `make containerd-binary`) reading the main file plus the drop-in.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.tools import missing_tool
from tests.unit.ansible_render import ansible_renders
from tests.unit.test_ansible_filters import plugin

containerd_config = plugin("containerd_config")

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles/nvidia_container_toolkit"
CACHE = REPO / ".cache/containerd/root"
CONTAINERD = CACHE / "usr/bin/containerd"
MAIN = "/etc/containerd/config.toml"
GLOB = "/etc/containerd/conf.d/*.toml"
CRI = "io.containerd.grpc.v1.cri"
# /etc/containerd/config.toml as Debian 12's containerd 1.6.20~ds1 ships it (a conffile; the
# binary test below checks this copy against the package).
DEBIAN_CONFIG = """version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"""
MIRROR = """
    [plugins."io.containerd.grpc.v1.cri".registry.mirrors."registry.lab.example"]
      endpoint = ["https://mirror.lab.example"]
"""
DEBIAN_CONTAINERD = "containerd\t1.6.20~ds1-1+deb12u3\tinstall\tinstalled"
UBUNTU_CONTAINERD = "containerd\t1.7.28-0ubuntu1~24.04.1\tinstall\tinstalled"


def role_renders(expression: str, query_line: str, **variables: Any) -> Any:
    """`expression` over the role's defaults and vars, as Ansible templates them for one node."""
    extra = {"nvidia_container_toolkit_query": {"stdout_lines": [query_line]}, **variables}
    return ansible_renders(expression, [ROLE / "defaults/main.yml", ROLE / "vars/main.yml"], extra)


@pytest.fixture(scope="module")
def cri_settings() -> dict[str, Any]:
    """What the role sets in the CRI section on Debian 12 (containerd 1.6: no CDI)."""
    return role_renders("nvidia_container_toolkit_cri_settings", DEBIAN_CONTAINERD)


def plan(main_text: str | None, settings: dict[str, Any], glob: str = GLOB) -> dict[str, Any]:
    return containerd_config.containerd_drop_in_plan(main_text, MAIN, glob, settings)


def with_imports(main_text: str, planned: dict[str, Any]) -> str:
    """The main file after the role's lineinfile: the imports line replaced, or put first."""
    lines = main_text.splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if re.match(planned["imports_regexp"], line)]
    if at:
        lines[at[-1]] = planned["imports_line"] + "\n"
        return "".join(lines)
    return planned["imports_line"] + "\n" + main_text


def cri_of(config: dict[str, Any]) -> dict[str, Any]:
    return config["plugins"][CRI]


def test_the_drop_in_carries_the_package_cri_section_and_the_runtimes(cri_settings):
    planned = plan(DEBIAN_CONFIG + MIRROR, cri_settings)
    assert planned["problems"] == [] and planned["main_content"] is None
    assert planned["imports_line"] == f'imports = ["{GLOB}"]'
    drop_in = tomllib.loads(planned["drop_in"])
    assert drop_in["version"] == 2 and list(drop_in["plugins"]) == [CRI], "only the CRI plugin is replaced"
    cri = cri_of(drop_in)
    assert cri["cni"] == {"bin_dir": "/usr/lib/cni", "conf_dir": "/etc/cni/net.d"}
    assert cri["registry"]["mirrors"]["registry.lab.example"] == {"endpoint": ["https://mirror.lab.example"]}
    runtimes = cri["containerd"]["runtimes"]
    assert cri["containerd"]["default_runtime_name"] == "runc"
    assert runtimes["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True},
    }
    assert runtimes["runc"] == {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}}
    assert "enable_cdi" not in cri, "containerd 1.6's CRI plugin has no CDI"


def test_the_role_turns_cdi_on_from_containerd_1_7_and_keeps_runc_the_default():
    settings = role_renders("nvidia_container_toolkit_cri_settings", UBUNTU_CONTAINERD)
    assert settings["enable_cdi"] is True and settings["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    assert settings["containerd"]["default_runtime_name"] == "runc"


def test_the_roles_plan_for_a_node_without_a_main_file_writes_a_minimal_one():
    planned = role_renders("nvidia_container_toolkit_containerd_plan", DEBIAN_CONTAINERD)
    assert planned["main_content"] == f'version = 2\nimports = ["{GLOB}"]\n'
    assert planned["problems"] == []
    assert cri_of(tomllib.loads(planned["drop_in"]))["containerd"]["runtimes"]["nvidia"]["options"]["SystemdCgroup"]


def test_a_site_setting_wins_where_the_role_sets_nothing_and_the_role_wins_where_it_does(cri_settings):
    site = (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.lab.example/pause:3.9"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "nvidia"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n  BinaryName = "/usr/sbin/runc"\n'
    )
    cri = cri_of(tomllib.loads(plan(site, cri_settings)["drop_in"]))
    assert cri["sandbox_image"] == "registry.lab.example/pause:3.9"
    assert cri["containerd"]["default_runtime_name"] == "runc", "nvidia_container_toolkit_default_runtime decides"
    assert cri["containerd"]["runtimes"]["runc"]["options"] == {"BinaryName": "/usr/sbin/runc", "SystemdCgroup": True}


def test_an_existing_imports_line_gains_the_glob_once(cri_settings):
    site = 'version = 2\nimports = ["/etc/containerd/site.toml"]  # the site\'s\n' + DEBIAN_CONFIG.split("\n", 1)[1]
    planned = plan(site, cri_settings)
    assert planned["problems"] == []
    assert planned["imports_line"] == f'imports = ["/etc/containerd/site.toml", "{GLOB}"]'
    done = with_imports(site, planned)
    assert tomllib.loads(done)["imports"] == ["/etc/containerd/site.toml", GLOB]
    assert plan(done, cri_settings)["imports_line"] is None, "a second run leaves the line alone"


@pytest.mark.parametrize(
    ("main_text", "problem"),
    [
        (
            "version = 2\n[plugins\n",
            f"{MAIN}: not valid TOML (Expected ']' at the end of a table declaration (at line 2",
        ),
        ('[plugins.cri.cni]\n  bin_dir = "/usr/lib/cni"\n', f"{MAIN}: config version 1; the role handles version 2"),
        ("version = 3\n", f"{MAIN}: config version 3; the role handles version 2"),
        ('version = 2\ndisabled_plugins = ["cri"]\n', f"{MAIN}: disabled_plugins turns off the CRI plugin"),
        (
            'version = 2\nimports = [\n  "/etc/containerd/site.toml",\n]\n',
            f"{MAIN}: its imports key is not one top-level line (lines 2)",
        ),
        (
            'version = 2\n[plugins."io.containerd.x"]\nimports = "not the top-level key"\n',
            f"{MAIN}: its imports key is not one top-level line (lines 3)",
        ),
    ],
    ids=["broken-toml", "version-1", "version-3", "cri-disabled", "multi-line-imports", "nested-imports-key"],
)
def test_a_main_file_the_role_cannot_extend_is_named_with_the_fix(cri_settings, main_text, problem):
    problems = plan(main_text, cri_settings)["problems"]
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_a_value_toml_cannot_hold_is_named_with_its_key():
    problems = plan("version = 2\n", {"containerd": {"when": object()}})["problems"]
    assert problems == [f"{MAIN}: plugins.{CRI}.containerd.when: object has no TOML form here"]


scalars = (
    st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
)
tables = st.recursive(
    st.dictionaries(st.text(max_size=8), values, max_size=4),
    lambda inner: st.dictionaries(st.text(max_size=8), inner | values, max_size=4),
    max_leaves=12,
)


@given(tables)
def test_toml_text_reads_back_as_the_same_data(data):
    assert tomllib.loads(containerd_config.toml_text(data)) == data


needs_containerd = pytest.mark.skipif(
    not CONTAINERD.exists(), reason=missing_tool("containerd", "make containerd-binary; make test-offline does it")
)


def config_dump(main: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONTAINERD), "--config", str(main), "config", "dump"], capture_output=True, text=True, timeout=60
    )


def node_files(tmp_path: Path, main_text: str, drop_in: str | None, settings: dict[str, Any]) -> Path:
    """tmp_path/config.toml with the imports line the role would add, and the drop-in under tmp_path/conf.d."""
    planned = plan(main_text, settings, glob=f"{tmp_path}/conf.d/*.toml")
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d/99-nvidia.toml").write_text(planned["drop_in"] if drop_in is None else drop_in)
    main = tmp_path / "config.toml"
    main.write_text(with_imports(main_text, planned))
    return main


@needs_containerd
def test_the_debian_package_ships_the_config_this_test_starts_from():
    assert (CACHE / "etc/containerd/config.toml").read_text() == DEBIAN_CONFIG


@needs_containerd
def test_containerd_reads_runc_by_default_the_nvidia_runtime_and_the_sites_mirror(tmp_path, cri_settings):
    main = node_files(tmp_path, DEBIAN_CONFIG + MIRROR, None, cri_settings)
    dumped = config_dump(main)
    assert dumped.returncode == 0, dumped.stderr
    cri = cri_of(tomllib.loads(dumped.stdout))
    assert cri["containerd"]["default_runtime_name"] == "runc"
    assert set(cri["containerd"]["runtimes"]) == {"runc", "nvidia"}
    assert cri["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    for runtime in ("runc", "nvidia"):
        assert cri["containerd"]["runtimes"][runtime]["options"]["SystemdCgroup"] is True, runtime
    assert cri["registry"]["mirrors"]["registry.lab.example"]["endpoint"] == ["https://mirror.lab.example"]
    assert cri["cni"]["bin_dir"] == "/usr/lib/cni", "Debian's CNI directory survives"
    # The role's `validate:` runs the same command on the drop-in alone.
    alone = config_dump(tmp_path / "conf.d/99-nvidia.toml")
    assert alone.returncode == 0, alone.stderr


@needs_containerd
def test_a_drop_in_with_only_the_runtime_would_lose_the_main_files_cri_section(tmp_path, cri_settings):
    """Why the drop-in carries the whole section: containerd 1.6 replaces a plugin's section per import."""
    only_runtime = containerd_config.toml_text(
        {
            "version": 2,
            "plugins": {CRI: {"containerd": {"runtimes": {"nvidia": {"runtime_type": "io.containerd.runc.v2"}}}}},
        }
    )
    main = node_files(tmp_path, DEBIAN_CONFIG + MIRROR, only_runtime, cri_settings)
    cri = cri_of(tomllib.loads(config_dump(main).stdout))
    assert "registry.lab.example" not in cri["registry"]["mirrors"]
    assert cri["cni"]["bin_dir"] == "/opt/cni/bin", "containerd's default replaced Debian's"
    assert set(cri["containerd"]["runtimes"]) == {"nvidia"}, "runc itself is gone"


@needs_containerd
def test_containerd_refuses_what_the_plan_refuses(tmp_path):
    """A version 1 main file (no version key) cannot import a version 2 drop-in: containerd says so too."""
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d/99-nvidia.toml").write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n')
    main = tmp_path / "config.toml"
    main.write_text(f'imports = ["{tmp_path}/conf.d/*.toml"]\n[plugins.cri.cni]\n  bin_dir = "/usr/lib/cni"\n')
    dumped = config_dump(main)
    assert dumped.returncode != 0 and "99-nvidia.toml" in dumped.stderr
