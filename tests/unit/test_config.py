"""Unit tests for adk_gateway.config: flags, ADK_GATEWAY_* variables, precedence and errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from adk_gateway.config import ENV_PREFIX, Settings, SettingsError, build_parser, load_settings

ROOT = Path(__file__).resolve().parents[2]


def test_defaults() -> None:
    s = load_settings([], env={})
    assert s == Settings()
    assert (s.host, s.port, s.agent, s.session_store, s.detach_on_disconnect) == (
        "127.0.0.1", 8080, "demo", "memory://", False)
    assert s.max_body_bytes == 10 * 1024 * 1024
    assert s.keepalive_s == 15.0 and s.busy_grace_ms == 300 and s.max_llm_calls == 25


def test_every_setting_has_a_flag_and_a_variable() -> None:
    parser = build_parser()
    flags = {opt for action in parser._actions for opt in action.option_strings}
    for name in Settings.model_fields:
        assert "--" + name.replace("_", "-") in flags
        env = {ENV_PREFIX + name.upper(): "zz-value"}
        # The variable is read: either the value is taken, or it is refused naming the flag.
        try:
            taken = load_settings([], env=env)
        except SettingsError as exc:
            assert "--" + name.replace("_", "-") in str(exc)
        else:
            assert getattr(taken, name) == "zz-value"


def test_flags() -> None:
    s = load_settings(
        ["--host", "0.0.0.0", "--allow-anonymous", "--port", "9000", "--keepalive-s", "0.5", "--session-store", "sqlite:///tmp/x.db",
         "--log-format", "json", "--approval-timeout-s", "30"],
        env={},
    )
    assert (s.host, s.port, s.keepalive_s, s.session_store, s.log_format, s.approval_timeout_s) == (
        "0.0.0.0", 9000, 0.5, "sqlite:///tmp/x.db", "json", 30.0)


def test_environment() -> None:
    s = load_settings([], env={"ADK_GATEWAY_PORT": "9001", "ADK_GATEWAY_MAX_LLM_CALLS": "7",
                               "ADK_GATEWAY_USER_HEADER": "x-who", "UNRELATED": "1"})
    assert (s.port, s.max_llm_calls, s.user_header) == (9001, 7, "x-who")


def test_precedence_flag_over_env_over_default() -> None:
    env = {"ADK_GATEWAY_PORT": "9001", "ADK_GATEWAY_HOST": "10.0.0.1", "ADK_GATEWAY_ALLOW_ANONYMOUS": "true"}
    s = load_settings(["--port", "9002"], env=env)
    assert s.port == 9002  # flag beats env
    assert s.host == "10.0.0.1"  # env beats default
    assert s.agent == "demo"  # default


def test_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADK_GATEWAY_BUSY_GRACE_MS", "42")
    assert load_settings([]).busy_grace_ms == 42


@pytest.mark.parametrize(
    ("raw", "value"),
    [("1", True), ("true", True), ("YES", True), (" on ", True), ("0", False), ("false", False), ("No", False),
     ("off", False), ("", False)],
)
def test_boolean_variables(raw: str, value: bool) -> None:
    assert load_settings([], env={"ADK_GATEWAY_DETACH_ON_DISCONNECT": raw}).detach_on_disconnect is value


def test_boolean_flags_beat_the_environment() -> None:
    assert load_settings(["--detach-on-disconnect"], env={}).detach_on_disconnect is True
    on = {"ADK_GATEWAY_DETACH_ON_DISCONNECT": "1"}
    assert load_settings(["--no-detach-on-disconnect"], env=on).detach_on_disconnect is False
    assert load_settings([], env=on).detach_on_disconnect is True


def test_wrong_boolean_names_the_flag_and_the_variable() -> None:
    with pytest.raises(SettingsError) as info:
        load_settings([], env={"ADK_GATEWAY_DETACH_ON_DISCONNECT": "maybe"})
    assert "--detach-on-disconnect" in str(info.value)
    assert "ADK_GATEWAY_DETACH_ON_DISCONNECT" in str(info.value)
    assert "maybe" in str(info.value)


@pytest.mark.parametrize(
    ("argv", "env", "flag"),
    [
        (["--port", "nope"], {}, "--port"),
        (["--port", "70000"], {}, "--port"),
        ([], {"ADK_GATEWAY_PORT": "-1"}, "--port"),
        (["--keepalive-s", "0"], {}, "--keepalive-s"),
        (["--log-level", "loud"], {}, "--log-level"),
        (["--session-store", "no-scheme-here"], {}, "--session-store"),
        (["--stream-store", "file:///tmp"], {}, "--stream-store"),
        (["--agent", "   "], {}, "--agent"),
        (["--max-body-bytes", "10"], {}, "--max-body-bytes"),
        ([], {"ADK_GATEWAY_MAX_LLM_CALLS": "0"}, "--max-llm-calls"),
    ],
)
def test_wrong_values_name_the_flag(argv: list[str], env: dict[str, str], flag: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(argv, env=env)
    message = str(info.value)
    assert flag in message
    assert ENV_PREFIX + flag[2:].replace("-", "_").upper() in message
    assert "\n" not in message


def test_two_wrong_values_are_both_reported() -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(["--port", "x", "--keepalive-s", "-1"], env={})
    assert "--port" in str(info.value) and "--keepalive-s" in str(info.value)


def test_settings_are_frozen_and_strict() -> None:
    s = Settings()
    with pytest.raises(ValueError):
        s.port = 1  # type: ignore[misc]
    with pytest.raises(ValueError):
        Settings(no_such_setting=1)  # type: ignore[call-arg]


def test_effective_model_and_origins() -> None:
    assert Settings().effective_model({}) == "scripted"
    assert Settings().effective_model({"GOOGLE_API_KEY": "k"}) == "gemini-2.5-flash"
    assert Settings(model="scripted").effective_model({"GOOGLE_API_KEY": "k"}) == "scripted"
    assert Settings(allowed_origins=" https://a.example/ ,https://b.example,, ").origins == {
        "https://a.example", "https://b.example"}


@pytest.mark.parametrize(("argv", "env"), [
    (["--allowed-origins", "http://localhost:3000/"], {}),
    (["--cors-origins", "http://localhost:3000/"], {}),
    ([], {"ADK_GATEWAY_ALLOWED_ORIGINS": "http://localhost:3000/"}),
    ([], {"ADK_GATEWAY_CORS_ORIGINS": "http://localhost:3000/"}),
])
def test_one_origin_list_for_http_and_the_websocket(argv: list[str], env: dict[str, str]) -> None:
    # --allowed-origins, or its older name --cors-origins: the same list for CORS and the socket.
    s = load_settings(argv, env=env)
    assert s.origins == {"http://localhost:3000"}
    assert s.origin_keys == {"http://localhost:3000"}


def test_the_older_origin_name_adds_to_the_list() -> None:
    s = load_settings(["--cors-origins", "https://b.example"], env={"ADK_GATEWAY_ALLOWED_ORIGINS": "https://a.example"})
    assert s.origins == {"https://a.example", "https://b.example"}
    assert s.origin_keys == {"https://a.example", "https://b.example"}
    # Each name keeps its own precedence: a flag beats its variable.
    s = load_settings(["--allowed-origins", "https://c.example"], env={"ADK_GATEWAY_ALLOWED_ORIGINS": "https://a.example"})
    assert s.origins == {"https://c.example"}
    assert Settings().origins == Settings().origin_keys == frozenset()


@pytest.mark.parametrize(("argv", "env", "named"), [
    (["--allowed-origins", "*"], {}, "--allowed-origins / ADK_GATEWAY_ALLOWED_ORIGINS"),
    (["--cors-origins", "*"], {}, "--cors-origins / ADK_GATEWAY_CORS_ORIGINS"),
    ([], {"ADK_GATEWAY_CORS_ORIGINS": "https://a.example, *"}, "--cors-origins / ADK_GATEWAY_CORS_ORIGINS"),
])
def test_a_star_origin_with_auth_none_names_the_setting_used(argv: list[str], env: dict[str, str],
                                                             named: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(argv, env=env)
    assert named in str(info.value) and "--auth none" in str(info.value) and "\n" not in str(info.value)


def test_help_names_the_older_origin_flag_as_an_alias() -> None:
    text = " ".join(build_parser().format_help().split())
    assert "--cors-origins CORS_ORIGINS The older name of --allowed-origins" in text
    assert "HTTP API (CORS" in text and "open the WebSocket" in text


def test_main_exits_2_with_one_line_for_a_bad_port() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    proc = subprocess.run(
        [sys.executable, "-m", "adk_gateway", "--port", "nope"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("adk-gateway: ")
    assert "--port" in lines[0] and "ADK_GATEWAY_PORT" in lines[0] and "'nope'" in lines[0]
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_main_exits_2_for_a_bad_environment_value() -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}, "ADK_GATEWAY_PORT": "http"}
    proc = subprocess.run(
        [sys.executable, "-m", "adk_gateway"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "ADK_GATEWAY_PORT" in proc.stderr


def test_readme_lists_every_setting() -> None:
    """README's settings table is the one `settings_table()` renders (regenerate it from there)."""
    from adk_gateway.config import settings_table

    readme = (ROOT / "README.md").read_text()
    assert settings_table() in readme, (
        "README.md's settings table is stale: replace it with the output of "
        "`.venv/bin/python -c 'from adk_gateway.config import settings_table; print(settings_table())'`"
    )


@pytest.mark.parametrize(("value", "expected"), [("50000,20,10", (50000, 20, 10)), (" 700, 10 ,10 ", (700, 10, 10)),
                                                 ("python", None)])
def test_gc_thresholds(value: str, expected: tuple[int, int, int] | None) -> None:
    assert load_settings(["--gc-thresholds", value], env={}).gc_threshold_values() == expected


@pytest.mark.parametrize("value", ["50000,20", "0,10,10", "a,b,c", "-1,10,10", ""])
def test_bad_gc_thresholds_are_refused(value: str) -> None:
    with pytest.raises(SettingsError, match="gc"):
        load_settings([f"--gc-thresholds={value}"], env={})
