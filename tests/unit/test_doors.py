"""Unit tests for issue 36's doors: what log lines may show of a URL, which user ids and hosts
pass, how origins compare, and the settings that stop the start."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adk_gateway.config import Settings, host_name, is_ip_address, origin_key
from adk_gateway.logs import _json_line, _redact_credentials
from adk_gateway.services.auth import clean_user_id, query_token, redact, redact_query, redact_target

TOKEN = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~", min_size=12,
                max_size=80)


def spellings(name: str) -> list[str]:
    """`access_token` as a query may spell it: any case, any of its characters percent-encoded."""
    return [name, name.upper(), name.replace("_", "%5F"), name.replace("_", "%5f"),
            "".join(f"%{ord(ch):02X}" for ch in name), quote(name.title(), safe="")]


# --- redaction ------------------------------------------------------------------------------------


@given(token=TOKEN, spelling=st.sampled_from(spellings("access_token")),
       equals=st.sampled_from(["=", "%3D", "%3d"]), before=st.sampled_from(["", "v=7&"]),
       after=st.sampled_from(["", "&x=1"]))
def test_no_spelling_of_a_query_token_reaches_a_log_line(
    token: str, spelling: str, equals: str, before: str, after: str
) -> None:
    query = f"{before}{spelling}{equals}{token}{after}"
    for shown in (redact(f"GET /api/chat/ws?{query} HTTP/1.1"), redact_target("/api/chat/ws", query)):
        assert token not in shown.replace("[redacted]", ""), shown


def test_the_query_shows_its_names_never_its_values() -> None:
    assert redact_query("access%5Ftoken=abc&v=7&flag") == "access_token=[redacted]&v=[redacted]&flag"
    # A name that decodes to something other than a plain word (here: the token itself) goes whole.
    assert redact_query("access_token%3Dabc.def.ghi") == "[redacted]"
    assert redact_target("/api/chat/ws", "") == "/api/chat/ws"
    # Prose with a question mark stays as it is.
    assert redact("why? because x=1") == "why? because x=1"


def test_jwts_and_bearer_credentials_go_wherever_they_are() -> None:
    jwt_like = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"
    assert jwt_like not in redact(f"no JWKS key with kid '{jwt_like}'")
    assert "abc.def" not in redact("authorization: BEARER abc.def")


def test_the_last_processor_redacts_every_string_value() -> None:
    event = {"event": "socket_open", "path": "/api/chat/ws?access%5Ftoken=secret-token-value", "n": 3}
    out = _redact_credentials(None, "info", event)
    assert "secret-token-value" not in json.dumps(out) and out["n"] == 3


def test_query_token_reads_the_decoded_name_only() -> None:
    assert query_token("access%5Ftoken=abc") == "abc"  # what a browser's URLSearchParams means
    assert query_token("access_token%3Dabc") is None  # a name with the token in it: no token
    assert query_token("ACCESS_TOKEN=abc") is None
    assert query_token("x=1&access_token=") is None


def test_a_line_with_a_lone_surrogate_is_written_not_lost() -> None:
    line = _json_line({"event": "run_started", "user_id": "\udcff\udcfe"})
    assert json.loads(line)["event"] == "run_started"


# --- user ids -------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["ali\x7fce", "a\x00b", "a\u2028b", "a\u2029b", "ali\u202ece", "a\u200bb",
                                 "\ufeffalice", "\udcff", "a\ud800", "", "   ", "x" * 257, 42, None])
def test_user_ids_that_could_change_how_a_log_line_reads_are_refused(raw: Any) -> None:
    assert clean_user_id(raw) is None


@pytest.mark.parametrize("raw", ["alice", " alice ", "Zoë", "用户", "user@example.com", "x" * 256])
def test_ordinary_user_ids_pass(raw: str) -> None:
    assert clean_user_id(raw) == raw.strip()


# --- hosts and origins ----------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "name"), [
    ("localhost:8080", "localhost"), ("LocalHost.:5173", "localhost"), ("[::1]:8080", "::1"),
    ("127.0.0.1", "127.0.0.1"), ("chat.example.com", "chat.example.com"), ("evil.test:8080", "evil.test"),
    ("a b", None), ("x:y", None), ("::1", None), ("[zz]", None), ("", None), ("evil.test:8080/x", None),
])
def test_host_names(raw: str, name: str | None) -> None:
    assert host_name(raw) == name


def test_ip_addresses_are_told_from_names() -> None:
    assert is_ip_address("10.1.2.3") and is_ip_address("::1") and is_ip_address("2001:db8::1")
    assert not is_ip_address("localhost") and not is_ip_address("1.example") and not is_ip_address("")


@pytest.mark.parametrize(("a", "b", "same"), [
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080/", True),
    ("HTTP://LocalHost:3000", "http://localhost:3000", True),
    ("http://chat.example.com:80", "http://chat.example.com", True),
    ("https://chat.example.com:443", "https://chat.example.com", True),
    ("https://127.0.0.1:8080", "http://127.0.0.1:8080", False),  # the scheme counts
    ("http://127.0.0.1:8081", "http://127.0.0.1:8080", False),  # the port counts
    ("http://evil.test:8080", "http://127.0.0.1:8080", False),
    ("null", "null", True),
])
def test_origins_are_compared_whole(a: str, b: str, same: bool) -> None:
    assert (origin_key(a) == origin_key(b)) is same


def test_the_names_a_gateway_answers_to() -> None:
    assert Settings().host_names == {"localhost", "127.0.0.1"}
    assert Settings(host="0.0.0.0", allow_anonymous=True).host_names == {"localhost"}
    listed = Settings(auth="api-keys", auth_api_keys_file="k", host="gw.internal",
                      allowed_hosts="Chat.Example.com, [2001:db8::1]")
    assert listed.host_names == {"localhost", "gw.internal", "chat.example.com", "2001:db8::1"}
    assert not listed.any_host and Settings(auth="api-keys", auth_api_keys_file="k", allowed_hosts="*").any_host


# --- settings that stop the start -----------------------------------------------------------------


JWT = {"auth": "jwt", "auth_jwt_secret": "s" * 32}


@pytest.mark.parametrize(("overrides", "names"), [
    ({"auth": "jwt", "auth_jwt_secret": "short-secret"}, ["--auth-jwt-secret", "--allow-weak-jwt-secret"]),
    ({"cors_origins": "*"}, ["--cors-origins", "--auth none"]),
    ({"cors_origins": "http://localhost:3000, *"}, ["--cors-origins"]),
    ({"allowed_origins": "*"}, ["--allowed-origins"]),
    ({"allowed_hosts": "*"}, ["--allowed-hosts"]),
    ({**JWT, "allowed_hosts": "https://chat.example.com"}, ["--allowed-hosts", "without a scheme or a port"]),
    ({**JWT, "allowed_hosts": "chat.example.com:443"}, ["--allowed-hosts"]),
    ({"auth": "jwt", "auth_jwks_url": "http://keys.example.com/jwks.json"}, ["--auth-jwks-url",
                                                                             "--allow-insecure-jwks"]),
    ({"auth": "jwt", "auth_jwks_url": "file:///etc/jwks.json"}, ["--auth-jwks-url", "https://"]),
])
def test_settings_that_leave_a_door_open_are_refused(overrides: dict[str, Any], names: list[str]) -> None:
    with pytest.raises(ValueError) as refused:
        Settings(**overrides)
    for name in names:
        assert name in str(refused.value)


@pytest.mark.parametrize("overrides", [
    {"auth": "jwt", "auth_jwt_secret": "short-secret", "allow_weak_jwt_secret": True},
    {"auth": "jwt", "auth_jwks_url": "http://keys.example.com/jwks.json", "allow_insecure_jwks": True},
    {"auth": "jwt", "auth_jwks_url": "http://127.0.0.1:9999/jwks.json"},  # loopback: allowed, with a warning
    {"auth": "jwt", "auth_jwks_url": "https://keys.example.com/jwks.json"},
    {**JWT, "cors_origins": "*", "allowed_origins": "*", "allowed_hosts": "*"},
    {"allowed_hosts": "chat.example.com,[::1]", "cors_origins": "http://localhost:3000"},
])
def test_settings_that_are_meant_start(overrides: dict[str, Any]) -> None:
    Settings(**overrides)
