"""The gateway's settings as its container gets them: options, their environment variables and
the refusals that name the option."""

from __future__ import annotations

import pytest

from serving.gateway.settings import parse


def test_the_environment_sets_the_keep_alive_and_an_option_overrides_it() -> None:
    assert parse(["--triton-grpc", "t:8001"], {"GATEWAY_KEEP_ALIVE_S": "30"}).keep_alive_s == 30
    assert parse(["--triton-grpc", "t:8001", "--keep-alive-s", "90"], {"GATEWAY_KEEP_ALIVE_S": "30"}).keep_alive_s == 90


@pytest.mark.parametrize("option", ["--keep-alive-s", "--probe-timeouts", "--max-body-bytes"])
def test_a_count_below_one_is_refused_with_the_option_named(option: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse(["--triton-grpc", "t:8001", option, "0"], {})
    assert exit_info.value.code == 2
    assert f"{option} must be at least 1, got 0" in capsys.readouterr().err
