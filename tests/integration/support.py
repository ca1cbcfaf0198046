"""Helpers for the HTTP-level integration tests: SSE reading, request bodies, a mini AI SDK client.

`Conversation` plays the part of the AI SDK's `AbstractChat` + `DefaultChatTransport`: it keeps
the UI messages, POSTs the whole history, and folds each response's chunks into the assistant
message the way the SDK's `processUIMessageStream` does, so continuation bodies (approvals, browser
tool outputs) look exactly like the ones a real client sends (see ai-sdk-protocol.md, section 5).
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient
from google.adk.agents import LlmAgent
from google.adk.tools import FunctionTool

import adk_gateway.agents.scripted  # noqa: F401  (registers the scripted model)
from adk_gateway.agents.tools import BrowserTool
from adk_gateway.config import Settings

Json = dict[str, Any]
WAIT_S = 5.0


def settings(**overrides: Any) -> Settings:
    """Gateway settings for tests: always the offline scripted model."""
    return Settings(model="scripted", **overrides)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def user_message(text: str, message_id: str | None = None) -> Json:
    return {"id": message_id or new_id("u"), "role": "user", "parts": [{"type": "text", "text": text}]}


def long_history(count: int, last_text: str = "/echo the end") -> list[Json]:
    """`count` alternating messages ending with a user message (the history caps' tests, and the
    bench's floods)."""
    messages: list[Json] = []
    for index in range(count - 1):
        if (count - 1 - index) % 2 == 0:
            messages.append(user_message(f"question {index}", f"u{index}"))
        else:
            messages.append({"id": f"a{index}", "role": "assistant",
                             "parts": [{"type": "step-start"}, {"type": "text", "text": f"answer {index}"}]})
    messages.append(user_message(last_text, f"u{count - 1}"))
    return messages


def chat_body(chat_id: str, messages: list[Json], **extra: Any) -> Json:
    return {"id": chat_id, "messages": messages, "trigger": "submit-message", **extra}


# --- reading SSE ----------------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    chunks: list[Json] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    done: bool = False
    body: Json | None = None  # the JSON body of a non-SSE answer

    @property
    def types(self) -> list[str]:
        return [c["type"] for c in self.chunks]

    def of_type(self, kind: str) -> list[Json]:
        return [c for c in self.chunks if c["type"] == kind]

    @property
    def finish_reason(self) -> str | None:
        finishes = self.of_type("finish")
        return finishes[-1].get("finishReason") if finishes else None

    @property
    def text(self) -> str:
        return "".join(c["delta"] for c in self.chunks if c["type"] == "text-delta")

    @property
    def error_code(self) -> str | None:
        return (self.body or {}).get("error", {}).get("code")


async def sse_events(response: ClientResponse) -> AsyncIterator[tuple[str, str]]:
    """Yields ("data", value) and ("comment", text) as they arrive, until the body ends."""
    data: list[str] = []
    while True:
        raw = await response.content.readline()
        if not raw:
            return
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                yield "data", "\n".join(data)
                data = []
        elif line.startswith(":"):
            yield "comment", line[1:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        else:
            raise AssertionError(f"unexpected SSE line {line!r}")


async def read_reply(response: ClientResponse) -> Reply:
    reply = Reply(status=response.status, headers={k.lower(): v for k, v in response.headers.items()})
    if not response.headers.get("Content-Type", "").startswith("text/event-stream"):
        text = await response.text()
        reply.body = json.loads(text) if text else None
        return reply
    async for kind, value in sse_events(response):
        if kind == "comment":
            reply.comments.append(value)
        elif value == "[DONE]":
            assert not reply.done, "two [DONE]"
            reply.done = True
        else:
            assert not reply.done, "a chunk after [DONE]"
            reply.chunks.append(json.loads(value))
    return reply


async def post_chat(client: TestClient[Any, Any], body: Json | str | bytes, *, headers: dict[str, str] | None = None,
                    path: str = "/api/chat") -> Reply:
    kwargs: dict[str, Any] = {"json": body} if isinstance(body, dict | list) else {"data": body}
    async with asyncio.timeout(WAIT_S * 4):
        async with client.post(path, headers=headers or {}, **kwargs) as response:
            return await read_reply(response)


async def wait_for(predicate: Callable[[], bool], timeout: float = WAIT_S, what: str = "condition") -> float:
    """Polls `predicate` until it holds; returns the seconds it took. Fails after `timeout`."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.005)
    return time.monotonic() - started


# --- a mini AI SDK client -------------------------------------------------------------------------


def tool_name_of(part: Json) -> str | None:
    if part.get("type") == "dynamic-tool":
        return str(part.get("toolName"))
    kind = str(part.get("type", ""))
    return kind.removeprefix("tool-") if kind.startswith("tool-") else None


def apply_chunks(message: Json, chunks: list[Json]) -> None:
    """Folds a response's chunks into an assistant UI message, as `processUIMessageStream` does."""
    parts: list[Json] = message["parts"]
    active: dict[str, Json] = {}

    def tool_part(call_id: str) -> Json:
        for part in reversed(parts):
            if tool_name_of(part) is not None and part.get("toolCallId") == call_id:
                return part
        raise AssertionError(f"No tool invocation found for tool call ID {call_id!r}")

    for chunk in chunks:
        kind = chunk["type"]
        if kind == "start":
            if chunk.get("messageId"):
                message["id"] = chunk["messageId"]
        elif kind == "start-step":
            parts.append({"type": "step-start"})
        elif kind == "finish-step":
            active.clear()
        elif kind in ("text-start", "reasoning-start"):
            part = {"type": kind.split("-")[0], "text": "", "state": "streaming"}
            parts.append(part)
            active[chunk["id"]] = part
        elif kind in ("text-delta", "reasoning-delta"):
            active[chunk["id"]]["text"] += chunk["delta"]
        elif kind in ("text-end", "reasoning-end"):
            active[chunk["id"]]["state"] = "done"
        elif kind == "file":
            parts.append({"type": "file", "url": chunk["url"], "mediaType": chunk["mediaType"]})
        elif kind in ("tool-input-start", "tool-input-available"):
            existing = [p for p in parts if p.get("toolCallId") == chunk["toolCallId"]]
            if existing:
                part = existing[-1]
            else:
                part = {"type": f"tool-{chunk['toolName']}", "toolCallId": chunk["toolCallId"]}
                parts.append(part)
            if chunk.get("providerExecuted") is not None:
                part["providerExecuted"] = chunk["providerExecuted"]
            if kind == "tool-input-start":
                part["state"] = "input-streaming"
            else:
                part["state"] = "input-available"
                part["input"] = chunk["input"]
        elif kind == "tool-approval-request":
            part = tool_part(chunk["toolCallId"])
            part["state"] = "approval-requested"
            part["approval"] = {"id": chunk["approvalId"]}
        elif kind == "tool-approval-response":
            matches = [p for p in parts if (p.get("approval") or {}).get("id") == chunk["approvalId"]]
            if not matches:
                raise AssertionError(f"No tool invocation found for approval ID {chunk['approvalId']!r}")
            part = matches[0]
            part["state"] = "approval-responded"
            part["approval"] = {**part["approval"], "approved": chunk["approved"]}
        elif kind == "tool-output-available":
            part = tool_part(chunk["toolCallId"])
            part.update(state="output-available", output=chunk["output"])
        elif kind == "tool-output-error":
            part = tool_part(chunk["toolCallId"])
            part.update(state="output-error", errorText=chunk["errorText"])
        elif kind == "tool-output-denied":
            tool_part(chunk["toolCallId"])["state"] = "output-denied"
        elif kind in ("source-url", "source-document"):
            parts.append({key: value for key, value in chunk.items() if key != "type"} | {"type": kind})
        elif kind.startswith("data-"):
            if chunk.get("transient"):
                continue
            same = [p for p in parts if p["type"] == kind and "id" in chunk and p.get("id") == chunk["id"]]
            if same:
                same[0]["data"] = chunk["data"]
            else:
                parts.append({"type": kind, "data": chunk["data"]} | ({"id": chunk["id"]} if "id" in chunk else {}))
        elif kind in ("finish", "abort", "error", "message-metadata", "tool-input-delta"):
            pass
        else:
            raise AssertionError(f"unexpected chunk {chunk}")


# One whole request and its answer over some transport: (body, headers) -> Reply. The
# transport contract suite (tests/transports) gives one per transport; by default a
# `Conversation` POSTs over HTTP.
Exchange = Callable[[Json, dict[str, str]], Awaitable[Reply]]


class Conversation:
    """One chat as the AI SDK client holds it; every POST carries the whole history."""

    def __init__(self, client: TestClient[Any, Any] | None, chat_id: str | None = None, *, user: str | None = None,
                 major: int = 6, exchange: Exchange | None = None) -> None:
        self.client = client
        self.exchange = exchange
        self.chat_id = chat_id or new_id("chat")
        self.messages: list[Json] = []
        self.headers: dict[str, str] = {}
        if user is not None:
            self.headers["x-user-id"] = user
        if major >= 7:
            self.headers["x-ai-sdk-major"] = str(major)
        self.replies: list[Reply] = []

    def fork(self, chat_id: str | None = None, user: str | None = None) -> Conversation:
        """A copy of this chat's messages in another client (a replay, another chat or user)."""
        other = Conversation(self.client, chat_id or self.chat_id, exchange=self.exchange)
        other.headers = dict(self.headers)
        if user is not None:
            other.headers["x-user-id"] = user
        other.messages = copy.deepcopy(self.messages)
        return other

    @property
    def assistant(self) -> Json:
        assert self.messages and self.messages[-1]["role"] == "assistant", self.messages
        return self.messages[-1]

    def part(self, tool_call_id: str) -> Json:
        return next(p for p in self.assistant["parts"] if p.get("toolCallId") == tool_call_id)

    def tool_parts(self, name: str | None = None) -> list[Json]:
        return [p for p in self.assistant["parts"] if tool_name_of(p) is not None
                and (name is None or tool_name_of(p) == name)]

    def pending_approvals(self) -> list[Json]:
        return [p for p in self.tool_parts() if p.get("state") == "approval-requested"]

    async def post(self, body: Json) -> Reply:
        if self.exchange is not None:
            reply = await self.exchange(body, dict(self.headers))
        else:
            assert self.client is not None, "a Conversation needs an HTTP client or an exchange"
            reply = await post_chat(self.client, body, headers=self.headers)
        self.replies.append(reply)
        return reply

    async def send(self, text: str) -> Reply:
        self.messages.append(user_message(text))
        reply = await self.post(chat_body(self.chat_id, self.messages))
        if reply.status == 200:
            assistant: Json = {"id": new_id("client-asst"), "role": "assistant", "parts": []}
            apply_chunks(assistant, reply.chunks)
            self.messages.append(assistant)
        return reply

    def continuation_body(self) -> Json:
        return chat_body(self.chat_id, copy.deepcopy(self.messages), messageId=self.assistant["id"])

    async def continue_(self) -> Reply:
        """POSTs the history as it is (what `sendAutomaticallyWhen` triggers) and folds the answer in."""
        reply = await self.post(self.continuation_body())
        if reply.status == 200:
            apply_chunks(self.assistant, reply.chunks)
        return reply

    def answer(self, part: Json, approved: bool, reason: str | None = None) -> None:
        """`addToolApprovalResponse`: the part goes to approval-responded."""
        assert part["state"] == "approval-requested", part
        part["state"] = "approval-responded"
        part["approval"] = {**part["approval"], "approved": approved, **({"reason": reason} if reason else {})}

    def add_output(self, part: Json, output: Any) -> None:
        """`addToolOutput`: the part goes to output-available (keeping its approval)."""
        part["state"] = "output-available"
        part["output"] = output

    async def approve(self, approved: bool = True, reason: str | None = None, index: int = 0) -> Reply:
        pending = self.pending_approvals()
        self.answer(pending[index], approved, reason)
        return await self.continue_()


# --- a counting agent -----------------------------------------------------------------------------


@dataclass
class ToolLog:
    """What the counting agent's tools did."""

    runs: dict[str, int] = field(default_factory=dict)
    started: dict[str, int] = field(default_factory=dict)
    cancelled: dict[str, int] = field(default_factory=dict)
    cancelling: dict[str, int] = field(default_factory=dict)
    slow_s: float = 5.0
    cancel_cleanup_s: float = 0.0  # how long `slow` takes to clean up when cancelled

    def count(self, name: str) -> int:
        return self.runs.get(name, 0)

    def bump(self, table: dict[str, int], name: str) -> None:
        table[name] = table.get(name, 0) + 1


def counting_agent(log: ToolLog, name: str = "counting_agent", **agent_kwargs: Any) -> LlmAgent:
    """Scripted agent whose tools count their runs; `guarded` needs approval through ADK."""

    async def guarded(item: str) -> dict[str, Any]:
        """Does something that needs the user's approval.

        Args:
            item: What to act on.
        """
        log.bump(log.runs, "guarded")
        return {"done": item, "runs": log.runs["guarded"]}

    async def tick() -> dict[str, Any]:
        """Counts at once."""
        log.bump(log.runs, "tick")
        return {"ticks": log.runs["tick"]}

    async def slow() -> dict[str, Any]:
        """Counts after a while."""
        log.bump(log.started, "slow")
        try:
            await asyncio.sleep(log.slow_s)
        except asyncio.CancelledError:
            log.bump(log.cancelling, "slow")
            if log.cancel_cleanup_s:
                await asyncio.sleep(log.cancel_cleanup_s)  # a slow cleanup: the run is "stopping"
            log.bump(log.cancelled, "slow")
            raise
        log.bump(log.runs, "slow")
        return {"slow": log.runs["slow"]}

    def show_card(title: str) -> None:
        """Shows a card in the browser (runs in the browser, after approval).

        Args:
            title: The card's title.
        """

    return LlmAgent(
        name=name,
        model="scripted",
        instruction="A test agent.",
        tools=[
            FunctionTool(guarded, require_confirmation=True),
            FunctionTool(tick),
            FunctionTool(slow),
            BrowserTool(show_card, needs_approval=True),
        ],
        **agent_kwargs,
    )


class ChunkReader:
    """A response read chunk by chunk, for tests that act in the middle of a stream: `next()` (the
    next chunk, None at the end; each bounded in time) gives `until`, `take` and `rest`."""

    reply: Reply

    async def next(self) -> Json | None:
        raise NotImplementedError

    async def until(self, predicate: Callable[[Json], bool]) -> Json:
        while True:
            chunk = await self.next()
            assert chunk is not None, f"the stream ended first: {self.reply.types}"
            if predicate(chunk):
                return chunk

    async def take(self, count: int) -> list[Json]:
        return [await self.until(lambda _c: True) for _ in range(count)]

    async def rest(self) -> Reply:
        while await self.next() is not None:
            pass
        return self.reply


class LiveStream(ChunkReader):
    """An SSE response being read chunk by chunk."""

    def __init__(self, response: ClientResponse) -> None:
        self.response = response
        self.reply = Reply(status=response.status, headers={k.lower(): v for k, v in response.headers.items()})
        self.order: list[str] = []  # chunk types and "comment" in arrival order
        self._events = sse_events(response)

    @classmethod
    async def open(cls, client: TestClient[Any, Any], body: Json, *, headers: dict[str, str] | None = None,
                   method: str = "POST", path: str = "/api/chat") -> LiveStream:
        if method == "POST":
            response = await client.post(path, json=body, headers=headers or {})
        else:
            response = await client.get(path, headers=headers or {})
        return cls(response)

    async def next(self) -> Json | None:
        """The next chunk, or None at the end of the body."""
        async with asyncio.timeout(WAIT_S):
            async for kind, value in self._events:
                if kind == "comment":
                    self.reply.comments.append(value)
                    self.order.append("comment")
                elif value == "[DONE]":
                    self.reply.done = True
                    self.order.append("[DONE]")
                else:
                    chunk = json.loads(value)
                    self.reply.chunks.append(chunk)
                    self.order.append(chunk["type"])
                    return chunk
        return None

    def close(self) -> None:
        """Drops the connection, as a browser tab that goes away does."""
        self.response.close()
