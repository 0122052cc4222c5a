"""The node config file: defaults, the shipped example, and errors that name the file and key."""

from __future__ import annotations

from pathlib import Path

import pytest
from cgroup_limiter.config import ConfigError, NodeConfig, load_config, parse_config

from tests.limiter.conftest import LIMITER


def test_empty_config_is_the_defaults(tmp_path: Path):
    (tmp_path / "c.yaml").write_text("")
    config = load_config(tmp_path / "c.yaml")
    assert config == NodeConfig()
    assert (config.metrics_port, config.on_exit, config.node_pressure_file) == (9500, "keep", Path("/proc/pressure/io"))
    adaptive = config.adaptive
    assert (adaptive.mode, adaptive.pressure_some_avg10, adaptive.release_some_avg10) == ("contention", 10.0, 2.0)
    assert (adaptive.trigger_intervals, adaptive.calm_intervals, adaptive.max_throttled) == (2, 5, 3)
    assert (adaptive.ceiling_bps, adaptive.min_rate_bps) == (50_000_000, 1_000_000)


def test_the_example_config_is_the_defaults_plus_its_examples():
    config = load_config(LIMITER / "config.example.yaml")
    assert config.adaptive == NodeConfig().adaptive
    triton = {"app.kubernetes.io/name": "triton", "app.kubernetes.io/part-of": "gpu-serving"}
    assert config.protect[0].matches("triton", triton)
    assert not config.protect[0].matches("batch", {"app": "etl"})


def test_threshold_mode_keeps_the_old_keys():
    raw = {"adaptive": {"mode": "threshold", "threshold_bps": "20M", "ceiling_bps": "8Mi", "release_bps": "2M"}}
    adaptive = parse_config(raw, "c.yaml").adaptive
    assert (adaptive.mode, adaptive.threshold_bps, adaptive.ceiling_bps) == ("threshold", 20_000_000, 8 * 2**20)


@pytest.mark.parametrize(
    ("raw", "key", "reason"),
    [
        ({"interval": 1}, "interval", "unknown key"),
        ({"on_exit": "drop"}, "on_exit", "keep, remove"),
        ({"interval_seconds": "fast"}, "interval_seconds", "expected a number"),
        ({"metrics": {"port": 70000}}, "metrics.port", "not a TCP port"),
        ({"adaptive": {"threshold_bps": "lots"}}, "adaptive.threshold_bps", "not a byte rate"),
        ({"adaptive": {"mode": "threshold", "ceiling_bps": "200M"}}, "adaptive", "above threshold_bps"),
        ({"adaptive": {"mode": "threshold", "release_bps": "60M"}}, "adaptive", "must be below ceiling_bps"),
        ({"adaptive": {"threshold_bps": "20M"}}, "adaptive.mode", "set mode: threshold"),
        ({"adaptive": {"mode": "calm"}}, "adaptive.mode", "contention, threshold"),
        ({"adaptive": {"release_some_avg10": 20}}, "adaptive", "must be below pressure_some_avg10"),
        ({"adaptive": {"pressure_some_avg10": 120}}, "adaptive.pressure_some_avg10", "percentage"),
        ({"adaptive": {"pressure_some_avg10": "high"}}, "adaptive.pressure_some_avg10", "expected a number"),
        ({"adaptive": {"min_rate_bps": "60M"}}, "adaptive", "must be below ceiling_bps"),
        ({"adaptive": {"max_throttled": 0}}, "adaptive.max_throttled", ">= 1"),
        ({"node_pressure_file": ""}, "node_pressure_file", "expected a path"),
        ({"adaptive": {"trigger_intervals": 0}}, "adaptive.trigger_intervals", ">= 1"),
        ({"adaptive": {"enabled": "yes"}}, "adaptive.enabled", "true or false"),
        ({"protect": [{}]}, "protect.0", "protect every pod"),
        ({"protect": {"labels": {}}}, "protect", "list of selectors"),
        ({"protect": [{"labels": {"tier": 1}}]}, "protect.0.labels", "strings"),
        ({"defaults": {"io_max": {"vda": {"wbps": "x"}}}}, "defaults.io_max.vda", "not a byte rate"),
        ({"defaults": {"cpu_weight": 0}}, "defaults", "1..10000"),
    ],
)
def test_errors_name_file_and_key(raw, key, reason):
    with pytest.raises(ConfigError) as error:
        parse_config(raw, "/etc/cgroup-limiter/config.yaml")
    assert str(error.value).startswith(f"/etc/cgroup-limiter/config.yaml: {key}: ")
    assert reason in str(error.value)


def test_yaml_syntax_error_names_the_line(tmp_path: Path):
    path = tmp_path / "config.yaml"
    path.write_text("interval_seconds: 1\nadaptive: [\n")
    with pytest.raises(ConfigError, match=r"config.yaml: line \d+: not valid YAML"):
        load_config(path)


def test_missing_file(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")
