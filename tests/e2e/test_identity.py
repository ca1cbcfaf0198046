"""Identity with the real clients: a gateway with `--auth jwt`, two users, one chat id.

Alice and bob each hold a JWT (HS256, minted here with PyJWT). Over SSE the client sends it as
`Authorization: Bearer <token>` (the transport's `headers`); over the WebSocket as
`?access_token=<token>` (the transport's `params`, as a browser does). Bob knows alice's chat id
(his client uses it), claims to be alice wherever the gateway takes the user from when auth is
off (`x-user-id` in the HTTP / frame headers, `userId` in the body) and, where it matters, starts
from a copy of alice's messages. With the token deciding the user, none of it reaches alice's
chat: his resume finds nothing, his stop stops nothing, his own run on that chat id (and its
abort) is his, his continuation finds nothing to continue, and her approval is refused to him
while she can still answer it.

Every scenario runs for ai 6 and ai 7, over SSE and over the WebSocket (ai 7's stock
`WebSocketChatTransport`, and the page's ai 6 port); the clients of one scenario use the same
`ai` package and transport. The scenarios of one test run at once (one driver process each).

The gateway runs without --detach-on-disconnect: a client's stop (an SSE disconnect, a WS
`abort`) stops that client's own run, so bob stopping his run on alice's chat id would show if
it reached hers.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jwt
import pytest

from tests.gateway_process import running_gateway

from .support import assert_clean, node_setup_problem, problems, run_scenario, single_turn, text_of, tool_parts

pytestmark = pytest.mark.e2e

SECRET = "e2e-identity-secret-0123456789abcdef"
KINDS = ["sse6", "sse7", "ws", "ws6"]
STREAM = "/stream 40 100"  # 40 deltas, 100 ms apart: alice's run stays active for about 4 s
FULL_TEXT = "".join(f"tok{i} " for i in range(40))
STREAM_CHUNKS = ["start", "start-step", "data-agent", "text-start", *["text-delta"] * 40, "text-end", "finish-step",
                 "finish"]
PAYMENT = '/tool process_payment {"amount": 5, "recipient": "bob"}'
REALM = 'Bearer realm="adk-gateway"'


def token(sub: str, *, secret: str = SECRET, ttl_s: int = 600) -> str:
    return jwt.encode({"sub": sub, "exp": int(time.time()) + ttl_s}, secret, algorithm="HS256")


# --- the gateway and the users -------------------------------------------------------------


@pytest.fixture(scope="module")
def auth_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("auth-gateway") / "gateway.log"


@pytest.fixture(scope="module")
def auth_gateway_url(auth_log: Path) -> Iterator[str]:
    """A gateway with --auth jwt (always started here, also when ADK_GATEWAY_E2E_URL is set)."""
    problem = node_setup_problem()
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    with running_gateway("--auth", "jwt", "--auth-jwt-secret", SECRET, log=auth_log, name="the auth gateway") as url:
        yield url


@pytest.fixture(scope="module")
def tokens() -> dict[str, str]:
    return {
        "alice": token("alice"),
        "bob": token("bob"),
        "forged": token("alice", secret="not-the-gateway-secret-0123456789abc"),
        "expired": token("alice", ttl_s=-600),  # well past the default 30 s leeway
    }


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def is_ws(kind: str) -> bool:
    return kind.startswith("ws")


def client(kind: str, credential: str | None, *, as_alice: bool = False, **extra: Any) -> dict[str, Any]:
    """One client's settings: its credential as its transport sends it (SSE: Authorization
    header; WebSocket: `access_token` query parameter), and with `as_alice` the claims of being
    alice that the gateway must ignore (x-user-id header, body userId)."""
    headers: dict[str, str] = {}
    settings: dict[str, Any] = {"params": {}}
    if credential is not None:
        if is_ws(kind):
            settings["params"] = {"access_token": credential}
        else:
            headers["authorization"] = f"Bearer {credential}"
    if kind in ("sse7", "ws"):  # an ai 7 app announces itself
        headers["x-ai-sdk-major"] = "7"
    body: dict[str, str] = {}
    if as_alice:
        headers["x-user-id"] = "alice"
        body["userId"] = "alice"
    return {**settings, "headers": headers, "body": body, **extra}


def scenario(
    url: str, kind: str, main: dict[str, Any], peers: dict[str, Any], *steps: dict[str, Any]
) -> dict[str, Any]:
    return {
        "kind": kind,
        "baseUrl": url,
        "chatId": f"identity-{kind}-{uuid.uuid4().hex[:10]}",
        **main,
        "peers": peers,
        "steps": list(steps),
    }


def http(
    kind: str, credential: str, name: str, method: str, path: str, who: str = "main", **extra: Any
) -> dict[str, Any]:
    """An `http` step of client `who`. SSE clients send their scenario headers (credential and
    claims included); a WebSocket client's credential is a query parameter of its socket, so the
    step names it in an Authorization header (its frame headers still go along)."""
    step: dict[str, Any] = {"type": "http", "method": method, "path": path, "name": name, "client": who, **extra}
    if is_ws(kind):
        step["headers"] = {"Authorization": f"Bearer {credential}"}
    return step


def stop_request(kind: str, credential: str, name: str, who: str) -> dict[str, Any]:
    return http(kind, credential, name, "POST", "/api/chat/{chatId}/stop", who, contentType="application/json", body={})


def send(text: str, who: str = "main", **extra: Any) -> dict[str, Any]:
    return {"type": "send", "text": text, "client": who, **extra}


def run_all(scenarios: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Runs the scenarios at once (one driver process each); their results by key."""
    with ThreadPoolExecutor(max_workers=len(scenarios)) as pool:
        futures = {key: pool.submit(run_scenario, s) for key, s in scenarios.items()}
        return {key: future.result() for key, future in futures.items()}


# --- reading results -----------------------------------------------------------------------


def peer(result: dict[str, Any], name: str) -> dict[str, Any]:
    assert name in result.get("peers", {}), problems(result)
    found: dict[str, Any] = result["peers"][name]
    return found


def http_result(client_result: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [h for h in client_result["http"] if h["name"] == name]
    assert len(found) == 1, (name, client_result["http"], client_result["driverErrors"])
    return found[0]


def only_chat_requests_of_its_transport(client_result: dict[str, Any]) -> None:
    kinds = {r["kind"] for r in client_result["requests"]}
    expected = {"ws-send", "ws-resume"} if is_ws(client_result["kind"]) else {"post", "get"}
    assert kinds <= expected, kinds


def assert_refused(client_result: dict[str, Any], request: dict[str, Any], status: int, code: str) -> None:
    """The request was refused before any stream: HTTP status and error code (SSE), or an `error`
    frame with that code (WebSocket); the chat shows the error and received no chunk."""
    assert request["chunkTypes"] == [], request["chunkTypes"]
    assert client_result["status"] == "error", problems(client_result)
    if is_ws(client_result["kind"]):
        assert request["end"] == "error", request
        assert request.get("errorCode") == code, request
        return
    assert request["httpStatus"] == status, request
    assert json.loads(request["errorBody"])["error"]["code"] == code, request["errorBody"]
    if client_result["kind"] == "sse7":  # ai 7 keeps the status on the chat's error (ai 6 does not)
        assert client_result["errorStatusCode"] == status
    else:
        assert code in client_result["error"]


def roles(client_result: dict[str, Any]) -> list[str]:
    return [m["role"] for m in client_result["messages"]]


# --- the scenarios, run at once per group ----------------------------------------------------


@pytest.fixture(scope="module")
def chats(auth_gateway_url: str, tokens: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Alice and bob each chat on the same chat id, bob claiming to be alice; each asks /api/me."""

    def one(kind: str) -> dict[str, Any]:
        alice, bob = tokens["alice"], tokens["bob"]
        return scenario(
            auth_gateway_url,
            kind,
            client(kind, alice),
            {"bob": client(kind, bob, as_alice=True)},
            send("/echo hello world"),
            send("/echo hello bob", "bob"),
            {"type": "waitIdle"},
            {"type": "waitIdle", "client": "bob"},
            http(kind, alice, "aliceMe", "GET", "/api/me"),
            http(kind, bob, "bobMe", "GET", "/api/me", "bob"),
        )

    return run_all({kind: one(kind) for kind in KINDS})


@pytest.fixture(scope="module")
def intrusions(auth_gateway_url: str, tokens: dict[str, str]) -> dict[str, dict[str, Any]]:
    """While alice's answer streams, bob (her chat id, her name in every claim, a copy of her
    messages) resumes it, stops it, continues it, and runs then aborts a stream of his own on
    that chat id, each from a client of its own (so that one that got through would not hold up
    the others); then a second client of alice's (her token only) resumes it."""

    def one(kind: str) -> dict[str, Any]:
        alice, bob = tokens["alice"], tokens["bob"]
        return scenario(
            auth_gateway_url,
            kind,
            client(kind, alice),
            {
                "bobResume": client(kind, bob, as_alice=True, messagesFrom="main"),
                "bobStop": client(kind, bob, as_alice=True),
                "bobContinue": client(kind, bob, as_alice=True, messagesFrom="main"),
                "bobRun": client(kind, bob, as_alice=True),
                "alice2": client(kind, alice, messagesFrom="main"),
            },
            send(STREAM),
            {"type": "waitChunks", "chunks": 5, "text": "tok1 "},  # alice's chat shows her answer
            {"type": "resume", "client": "bobResume"},
            stop_request(kind, bob, "bobStop", "bobStop"),
            {"type": "continue", "client": "bobContinue"},
            send("/stream 200 20", "bobRun"),
            {"type": "stopAfter", "chunks": 6, "client": "bobRun"},
            {"type": "resume", "client": "alice2"},  # her run is still going after all that
        )

    return run_all({kind: one(kind) for kind in KINDS})


@pytest.fixture(scope="module")
def owner_stop(auth_gateway_url: str, tokens: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The same stop request with alice's own token stops her run (the control for bob's)."""

    def one(kind: str) -> dict[str, Any]:
        alice = tokens["alice"]
        return scenario(
            auth_gateway_url,
            kind,
            client(kind, alice),
            {},
            send(STREAM),
            {"type": "waitChunks", "chunks": 5},
            stop_request(kind, alice, "aliceStop", "main"),
        )

    return run_all({kind: one(kind) for kind in KINDS})


@pytest.fixture(scope="module")
def approvals(auth_gateway_url: str, tokens: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Alice's payment waits for her approval; bob, with a copy of her messages, approves it
    first; then alice does."""

    def one(kind: str) -> dict[str, Any]:
        return scenario(
            auth_gateway_url,
            kind,
            client(kind, tokens["alice"]),
            {"bob": client(kind, tokens["bob"], as_alice=True, messagesFrom="main")},
            send(PAYMENT),
            {"type": "waitIdle"},
            {"type": "approve", "approved": True, "client": "bob"},
            {"type": "waitIdle", "client": "bob"},
            {"type": "approve", "approved": True},
        )

    return run_all({kind: one(kind) for kind in KINDS})


@pytest.fixture(scope="module")
def anonymous(auth_gateway_url: str, tokens: dict[str, str]) -> dict[str, dict[str, Any]]:
    """No credential (main), a token signed with another secret, an expired token."""

    def one(kind: str) -> dict[str, Any]:
        return scenario(
            auth_gateway_url,
            kind,
            client(kind, None, as_alice=True),
            {"forged": client(kind, tokens["forged"]), "expired": client(kind, tokens["expired"])},
            send("/echo hello"),
            send("/echo hello", "forged"),
            send("/echo hello", "expired"),
        )

    return run_all({kind: one(kind) for kind in KINDS})


# --- each user chats ---------------------------------------------------------------------------


def test_each_user_chats_with_a_token(chats: dict[str, dict[str, Any]], kind: str) -> None:
    result = chats[kind]
    assert text_of(single_turn(result)) == "hello world"
    bob = peer(result, "bob")
    assert text_of(single_turn(bob)) == "hello bob"
    for who in (result, bob):
        only_chat_requests_of_its_transport(who)
        assert who["counts"]["sends"] == 1, who["counts"]
        [request] = who["requests"]
        assert request["chunkTypes"][0] == "start"
        assert request["chunkTypes"][-1] == "finish"
        assert request["finishReason"] == "stop"
        if not is_ws(kind):
            assert request["httpStatus"] == 200
    # Two answers of their own on one chat id.
    assert bob["messages"][1]["id"] != result["messages"][1]["id"]


def test_the_token_names_the_user(chats: dict[str, dict[str, Any]], kind: str) -> None:
    """GET /api/me: bob is bob, whatever his x-user-id header says."""
    result = chats[kind]
    alice_me = http_result(result, "aliceMe")
    assert (alice_me["status"], alice_me["body"]) == (200, {"user": "alice", "auth": "jwt"})
    bob_me = http_result(peer(result, "bob"), "bobMe")
    assert (bob_me["status"], bob_me["body"]) == (200, {"user": "bob", "auth": "jwt"})


# --- bob and alice's active stream -----------------------------------------------------------------


def test_alices_stream_is_untouched_by_bob(intrusions: dict[str, dict[str, Any]], kind: str) -> None:
    result = intrusions[kind]
    assert_clean(result)
    answer = single_turn(result)
    assert text_of(answer) == FULL_TEXT
    [request] = result["requests"]
    assert request["chunkTypes"] == STREAM_CHUNKS
    assert request["finishReason"] == "stop"
    assert result["finishes"] == [{"isAbort": False, "isDisconnect": False, "isError": False, "finishReason": "stop"}]


def alice_still_streamed_after_bob(result: dict[str, Any]) -> None:
    """Her second client's resume, the last step, was answered with a stream: her run was still
    active after everything bob did."""
    [resume] = peer(result, "alice2")["requests"]
    if is_ws(result["kind"]):
        assert (resume["kind"], resume["end"]) == ("ws-resume", "end"), resume
    else:
        assert (resume["kind"], resume["httpStatus"], resume["sawDone"]) == ("get", 200, True), resume


def test_bob_cannot_resume_alices_stream(intrusions: dict[str, dict[str, Any]], kind: str) -> None:
    bob = peer(intrusions[kind], "bobResume")
    only_chat_requests_of_its_transport(bob)
    [resume] = bob["requests"]
    assert bob["status"] == "ready", problems(bob)
    if is_ws(kind):
        assert (resume["kind"], resume["end"]) == ("ws-resume", "no-active"), resume
    else:
        assert (resume["kind"], resume["httpStatus"]) == ("get", 204), resume
    assert resume["chunkTypes"] == []
    # Nothing of alice's answer reached him: his copy of it is as partial as when he made it.
    [copy] = [m for m in bob["messages"] if m["role"] == "assistant"]
    assert copy["id"] == intrusions[kind]["messages"][1]["id"]
    assert FULL_TEXT.startswith(text_of(copy)) and text_of(copy) != FULL_TEXT, text_of(copy)


def test_alice_resumes_her_own_stream(intrusions: dict[str, dict[str, Any]], kind: str) -> None:
    """The control for bob's resume: her second client, with her token alone, gets the whole
    answer (so her run was still active after bob's stop, continuation and abort)."""
    result = intrusions[kind]
    alice2 = peer(result, "alice2")
    assert alice2["status"] == "ready", problems(alice2)
    alice_still_streamed_after_bob(result)
    [resume] = alice2["requests"]
    assert resume["chunks"] == result["requests"][0]["chunks"]
    assert text_of(alice2["messages"][-1]) == FULL_TEXT


def test_bob_cannot_stop_alices_stream(intrusions: dict[str, dict[str, Any]], kind: str) -> None:
    stop = http_result(peer(intrusions[kind], "bobStop"), "bobStop")
    assert (stop["status"], stop["body"]) == (200, {"stopped": False}), stop
    alice_still_streamed_after_bob(intrusions[kind])
    assert text_of(intrusions[kind]["messages"][1]) == FULL_TEXT


def test_alice_can_stop_her_own_stream(owner_stop: dict[str, dict[str, Any]], kind: str) -> None:
    """The control for bob's stop: the same request with alice's token stops her run."""
    result = owner_stop[kind]
    assert_clean(result)
    stop = http_result(result, "aliceStop")
    assert (stop["status"], stop["body"]) == (200, {"stopped": True}), stop
    [request] = result["requests"]
    assert request["chunkTypes"].count("text-delta") < 40, request["chunkTypes"]
    assert text_of(result["messages"][-1]) != FULL_TEXT


def test_bob_cannot_continue_alices_answer(intrusions: dict[str, dict[str, Any]], kind: str) -> None:
    """Bob posts alice's (still streaming) answer back as a continuation: for him that chat id
    holds nothing to continue (not a busy chat, which would be alice's)."""
    bob = peer(intrusions[kind], "bobContinue")
    only_chat_requests_of_its_transport(bob)
    [continuation] = bob["requests"]
    assert continuation["lastMessageRole"] == "assistant"
    assert continuation["messageId"] == intrusions[kind]["messages"][1]["id"]
    assert_refused(bob, continuation, 409, "continuation_refused")
    alice_still_streamed_after_bob(intrusions[kind])


def test_bobs_abort_on_alices_chat_id_stops_only_his_run(intrusions: dict[str, dict[str, Any]], kind: str) -> None:
    """Bob's own run on alice's chat id starts (the chat is not busy for him) and his stop — an
    SSE disconnect, a WS `abort` — ends it; alice's answer goes on (see the tests above)."""
    result = intrusions[kind]
    bob = peer(result, "bobRun")
    assert bob["status"] == "ready", problems(bob)
    only_chat_requests_of_its_transport(bob)
    [request] = bob["requests"]
    assert request["stoppedAfterChunks"] >= 6
    assert request["chunkTypes"][-1] != "finish"
    if is_ws(kind):
        assert request["abortSent"] is True
    else:
        assert request["httpStatus"] == 200
    assert bob["finishes"][0]["isAbort"] is True
    [his] = [m for m in bob["messages"] if m["role"] == "assistant"]
    assert his["id"] != result["messages"][1]["id"]
    assert text_of(his).startswith("tok0 ")
    assert len(text_of(his).split()) < 200
    alice_still_streamed_after_bob(result)


# --- bob and alice's approval ----------------------------------------------------------------------


def test_bob_cannot_answer_alices_approval(approvals: dict[str, dict[str, Any]], kind: str) -> None:
    result = approvals[kind]
    bob = peer(result, "bob")
    only_chat_requests_of_its_transport(bob)
    [refused] = bob["requests"]
    assert refused["lastMessageRole"] == "assistant"
    assert refused["messageId"] == result["messages"][1]["id"]
    assert_refused(bob, refused, 403, "approval_invalid")
    # He answered alice's own approval id.
    [his_part] = tool_parts(bob["messages"][1], "process_payment")
    first = result["requests"][0]
    [request_chunk] = [c for c in first["chunks"] if c["type"] == "tool-approval-request"]
    assert his_part["approval"]["id"] == request_chunk["approvalId"]
    assert his_part["state"] == "approval-responded"


def test_alice_answers_her_approval_after_bob(approvals: dict[str, dict[str, Any]], kind: str) -> None:
    """Bob's refused answer ran nothing and did not use up the approval: alice's runs the tool
    exactly once."""
    result = approvals[kind]
    assistant = single_turn(result)
    only_chat_requests_of_its_transport(result)
    assert result["counts"]["sends"] == 2
    first, second = result["requests"]
    assert first["finishReason"] == "tool-calls"
    assert "tool-approval-request" in first["chunkTypes"]
    assert "tool-output-available" not in first["chunkTypes"]
    assert second["lastMessageRole"] == "assistant"
    assert second["chunkTypes"].count("tool-output-available") == 1, second["chunkTypes"]
    assert second["finishReason"] == "stop"
    [part] = tool_parts(assistant, "process_payment")
    assert part["state"] == "output-available"
    assert part["output"]["status"] == "completed"
    assert (part["output"]["amount"], part["output"]["recipient"]) == (5, "bob")
    output = json.dumps(part["output"], sort_keys=True, separators=(",", ":"))
    assert text_of(assistant) == f"process_payment -> {output}"


# --- no credential, or a bad one -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "challenge"),
    [("main", REALM), ("forged", f'{REALM}, error="invalid_token"'), ("expired", f'{REALM}, error="invalid_token"')],
)
def test_without_a_valid_token_nothing_streams(
    anonymous: dict[str, dict[str, Any]], kind: str, who: str, challenge: str
) -> None:
    result = anonymous[kind]
    assert_clean(result)
    chat = result if who == "main" else peer(result, who)
    assert chat["status"] == "error", problems(chat)
    assert roles(chat) == ["user"]  # no answer
    if is_ws(kind):
        # The socket is refused before the upgrade: no frame was ever sent.
        assert chat["requests"] == [], chat["requests"]
        assert {"event": "error", "message": "Unexpected server response: 401"} in chat["wsEvents"], chat["wsEvents"]
        return
    [request] = chat["requests"]
    assert request["kind"] == "post"
    assert request["httpStatus"] == 401
    assert request["chunkTypes"] == []
    assert json.loads(request["errorBody"])["error"]["code"] == "unauthorized"
    assert request["headers"]["www-authenticate"] == challenge
    if kind == "sse7":
        assert chat["errorStatusCode"] == 401


# --- the log ---------------------------------------------------------------------------------------


def test_tokens_are_not_logged(
    chats: dict[str, Any],
    intrusions: dict[str, Any],
    owner_stop: dict[str, Any],
    approvals: dict[str, Any],
    anonymous: dict[str, Any],
    auth_log: Path,
    tokens: dict[str, str],
) -> None:
    """After every scenario above (tokens in Authorization headers and in socket URLs, valid and
    not), no token, nor its signature, is in the gateway's log."""
    del chats, intrusions, owner_stop, approvals, anonymous  # they run first
    log_text = auth_log.read_text(errors="replace")
    assert len(log_text.splitlines()) > 20, log_text  # the requests above were logged
    for name, value in tokens.items():
        assert value not in log_text, f"the {name} token is in the gateway log"
        signature = value.rsplit(".", 1)[1]
        assert signature not in log_text, f"the {name} token's signature is in the gateway log"
