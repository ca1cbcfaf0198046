"""Unit tests for adk_gateway.services.auth's pure helpers and the development token minter."""

from __future__ import annotations

import jwt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adk_gateway.core.errors import Unauthorized
from adk_gateway.devtoken import mint
from adk_gateway.services.auth import AnonymousAuth, JwtAuth, bearer_token, redact

TOKEN_CHARS = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~+/=", min_size=8,
                      max_size=80)


@given(token=TOKEN_CHARS, before=st.sampled_from(["", "v=7&", "x=%20&"]),
       after=st.sampled_from(["", "&x=1", " HTTP/1.1"]))
def test_redact_removes_query_tokens(token: str, before: str, after: str) -> None:
    text = f"/api/chat/ws?{before}access_token={token}{after}"
    # Every value of the query goes, its names stay (a token may also occur in the text around
    # it, e.g. "/api/cha").
    names = "".join(f"{name}=[redacted]&" for name in (["v"] if before.startswith("v") else
                                                          ["x"] if before else []))
    tail = {"": "", "&x=1": "&x=[redacted]", " HTTP/1.1": " HTTP/1.1"}[after]
    assert redact(text) == f"/api/chat/ws?{names}access_token=[redacted]{tail}"


@given(token=TOKEN_CHARS)
def test_redact_removes_bearer_credentials(token: str) -> None:
    assert token not in redact(f"Authorization: Bearer {token}").replace("[redacted]", "")


def test_bearer_token() -> None:
    assert bearer_token({"Authorization": "Bearer abc.def"}) == "abc.def"
    assert bearer_token({"authorization": "bearer   abc "}) == "abc"
    for value in ("", "Bearer", "Bearer ", "Basic abc", "abc"):
        assert bearer_token({"Authorization": value}) is None
    assert bearer_token({}) is None


def test_anonymous_claims() -> None:
    auth = AnonymousAuth("x-user-id")
    assert auth.claimed({"x-user-id": " carol "}).user_id == "carol"
    assert auth.claimed({}, {"userId": "dave"}).user_id == "dave"
    assert auth.claimed({"x-user-id": "carol"}, {"userId": "dave"}).user_id == "carol"
    assert auth.claimed({"x-user-id": " "}, {}).user_id == "anonymous"
    assert not auth.claimed({}).verified
    # A user id that cannot be one is refused, not taken as anonymous (issue 36).
    for headers, body in (({"x-user-id": "\x00bad"}, None), ({}, {"userId": 42}), ({}, {"userId": "a\u2028b"})):
        with pytest.raises(Unauthorized):
            auth.claimed(headers, body)


async def test_minted_tokens_verify() -> None:
    auth = JwtAuth(secret="s" * 32, audience="app", issuer="iss")
    identity = await auth.verify(mint("s" * 32, "alice", audience="app", issuer="iss"))
    assert identity.user_id == "alice" and identity.verified
    with pytest.raises(Unauthorized):
        await auth.verify(mint("s" * 32, "alice", ttl_s=-3600, audience="app", issuer="iss"))
    assert jwt.decode(mint("k" * 32, "bob"), "k" * 32, algorithms=["HS256"])["sub"] == "bob"
