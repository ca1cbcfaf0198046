"""JSON from clients, parsed with a bound on nesting and without stalling the event loop.

Why not `json.loads`: the stdlib decoder recurses once per nesting level, so a body of 5,000
nested `[` raised `RecursionError` (a 500 over HTTP, a silently closed socket over WebSocket).
orjson parses without Python recursion and refuses documents deeper than 1,024 levels itself; the
gateway's own, smaller bound (`--max-json-depth`) is then checked on the parsed value with an
explicit stack, so no input makes anything recurse, here or in the code that walks the value later
(pydantic, `json.dumps` of tool arguments, ADK).

A chat history's earlier messages are not walked: a top-level `messages` list (the history of a
request body or a `send` frame) contributes only its last message here. The earlier ones are
never read unless the chat is imported or rebuilt from them, and `adk_gateway.core.requests` checks their
depth then (`validated_history`): a turn costs what is new in the history, not its length.

`loads_request` goes one step further for a request body or a frame: its top-level `messages`
list is not even built. msgspec scans the document (checking its syntax) and hands back each
message as the bytes the client sent (`msgspec.Raw`, no copy); orjson parses the other fields and
the last message, which becomes a `PostedMessage` (its bytes and its value). The earlier messages
stay `msgspec.Raw` and are parsed only when used (`parse_posted`), and the chat's fingerprint is
taken over their bytes as sent (`adk_gateway.core.requests.history_digest`). msgspec's scan of what it
skips is laxer than orjson (it lets invalid UTF-8 or an infinite number through inside a string or
number it does not decode), so the bytes of a message are trusted only once orjson has parsed them,
on this turn or, for a history the session already ran, on the turn that recorded their fingerprint.
A document that is not an object with a non-empty `messages` list is parsed whole, as by `loads`.

Large inputs: orjson itself is fast, and holds the GIL (a worker thread would not free the
loop); the depth walk is Python and costs several times more. `loads_async` walks in slices of a
few milliseconds and lets the loop run between them. Slicing on the loop, not a thread: a
CPU-bound thread makes every socket call of the loop wait for the GIL.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any, Final

import msgspec
import orjson

__all__ = [
    "ORJSON_MAX_DEPTH",
    "SLICE_S",
    "JsonRejected",
    "PostedMessage",
    "depth_exceeds",
    "depth_exceeds_async",
    "loads",
    "loads_async",
    "loads_request",
    "loads_request_async",
    "parse_posted",
    "too_deep",
]

# Longest stretch of CPU work on the event loop before it is given back (seconds).
SLICE_S: Final = 0.004
# Inputs up to this size are checked in one go (well under one slice).
SMALL_BYTES: Final = 32 * 1024
# orjson's own bound on nesting, past which it refuses a document.
ORJSON_MAX_DEPTH: Final = 1024
# A request's top-level fields, and its `messages` list, each value kept as the client's bytes.
_FIELDS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ITEMS: Final = msgspec.json.Decoder(list[msgspec.Raw])


class JsonRejected(ValueError):
    """The input is not JSON the gateway accepts; `reason` is "syntax" or "depth"."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class PostedMessage:
    """The last message of a posted history: the bytes the client sent (`raw`) and their value."""

    __slots__ = ("raw", "value")

    def __init__(self, raw: msgspec.Raw, value: Any) -> None:
        self.raw = raw
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PostedMessage) and self.raw == other.raw

    __hash__ = None  # type: ignore[assignment]  # compared by its bytes, like msgspec.Raw

    def __repr__(self) -> str:
        return f"PostedMessage({bytes(self.raw)[:60]!r})"


def parse_posted(raw: msgspec.Raw) -> Any:
    """An earlier message kept as posted, parsed now (orjson; no depth bound beyond orjson's own).

    Raises:
        JsonRejected: the bytes are not JSON that orjson accepts.
    """
    return _parse(memoryview(raw), ORJSON_MAX_DEPTH)


def _roots(value: Any, level: int) -> list[tuple[Any, int]]:
    """Where a walk starts, with depths: the value itself at `level`, except that of a whole
    document's (`level` 1) top-level `messages` list only the list and its last item are walked
    (see the module docstring)."""
    messages = value.get("messages") if level == 1 and isinstance(value, dict) else None
    if not isinstance(messages, list) or len(messages) < 2:
        return [(value, level)]
    roots: list[tuple[Any, int]] = [({k: v for k, v in value.items() if k != "messages"}, 1), ([], 2)]
    if _is_container(messages[-1]):
        roots.append((messages[-1], 3))
    return roots


def _walk(value: Any, max_depth: int, level: int = 1) -> Iterator[bool]:
    """Yields False after each container visited, True (and stops) at the first one past
    `max_depth`. A top-level object or array is depth 1; scalars add nothing."""
    stack = _roots(value, level)
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        if depth > max_depth:
            yield True
            return
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
        yield False


def _is_container(value: Any) -> bool:
    return isinstance(value, dict | list)


def depth_exceeds(value: Any, max_depth: int, *, level: int = 1) -> bool:
    """True when `value` nests containers more than `max_depth` deep. Iterative.

    `level`: where `value` sits in its document: 1 for a whole body or frame (whose earlier
    history messages are left out, see the module docstring), more for a part of one (a message of
    a history is at 3), walked whole."""
    return _is_container(value) and any(_walk(value, max_depth, level))


def too_deep(max_depth: int) -> JsonRejected:
    """The refusal of a document, or a part of one, nested deeper than `max_depth`."""
    return JsonRejected("depth", f"The JSON is nested more than {max_depth} levels deep.")


async def depth_exceeds_async(value: Any, max_depth: int, *, level: int = 1) -> bool:
    """`depth_exceeds`, giving the loop back every `SLICE_S`."""
    if not _is_container(value):
        return False
    started = time.perf_counter()
    for index, exceeded in enumerate(_walk(value, max_depth, level)):
        if exceeded:
            return True
        if index % 512 == 511 and time.perf_counter() - started > SLICE_S:
            await asyncio.sleep(0)
            started = time.perf_counter()
    return False


def _parse(raw: bytes | bytearray | memoryview | str, max_depth: int) -> Any:
    # max_depth only names the bound in the refusal of a document deeper than orjson's own.
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit"):
            raise too_deep(max_depth) from None
        raise JsonRejected("syntax", "The body is not valid JSON.") from None


def loads(raw: bytes | bytearray | memoryview | str, *, max_depth: int) -> Any:
    """Parses one JSON document.

    Raises:
        JsonRejected: not UTF-8, not JSON, or nested deeper than `max_depth`.
    """
    value = _parse(raw, max_depth)
    if depth_exceeds(value, max_depth):
        raise too_deep(max_depth)
    return value


async def loads_async(raw: bytes | bytearray | str, *, max_depth: int) -> Any:
    """`loads` for inputs of any size: a large one's depth is checked in slices (see the module
    docstring).

    Raises:
        JsonRejected: not UTF-8, not JSON, or nested deeper than `max_depth`.
    """
    if len(raw) <= SMALL_BYTES:
        return loads(raw, max_depth=max_depth)
    value = _parse(raw, max_depth)
    if await depth_exceeds_async(value, max_depth):
        raise too_deep(max_depth)
    return value


def _split_request(raw: bytes | bytearray | str, max_depth: int) -> dict[str, Any] | None:
    """A request whose top level is an object with a non-empty `messages` list: its fields, with
    `messages` as the messages' bytes (`msgspec.Raw`) but for the last one (a `PostedMessage`);
    None for any other document (or one msgspec refuses), which is then parsed whole."""
    try:
        fields = _FIELDS.decode(raw)
        listed = fields.get("messages")
        items = _ITEMS.decode(listed) if listed is not None else None
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    if not items:
        return None
    items[-1] = PostedMessage(items[-1], _parse(memoryview(items[-1]), max_depth))  # type: ignore[call-overload]
    return {key: items if key == "messages" else _parse(memoryview(field), max_depth)
            for key, field in fields.items()}


def _request_roots(value: dict[str, Any]) -> Iterator[tuple[Any, int]]:
    """What `loads_request` walks for depth: the fields but `messages` (depth 1), the last message (3)."""
    yield {k: v for k, v in value.items() if k != "messages"}, 1
    yield value["messages"][-1].value, 3


def loads_request(raw: bytes | bytearray | str, *, max_depth: int) -> Any:
    """A request body or a frame, with a top-level `messages` list kept as posted (see the module
    docstring); any other document as `loads` parses it.

    Raises:
        JsonRejected: not UTF-8, not JSON, or nested deeper than `max_depth`.
    """
    value = _split_request(raw, max_depth)
    if value is None:
        return loads(raw, max_depth=max_depth)
    if any(depth_exceeds(root, max_depth, level=level) for root, level in _request_roots(value)):
        raise too_deep(max_depth)
    return value


async def loads_request_async(raw: bytes | bytearray | str, *, max_depth: int) -> Any:
    """`loads_request` for inputs of any size: what is walked for depth is walked in slices.

    Raises:
        JsonRejected: not UTF-8, not JSON, or nested deeper than `max_depth`.
    """
    if len(raw) <= SMALL_BYTES:
        return loads_request(raw, max_depth=max_depth)
    value = _split_request(raw, max_depth)
    if value is None:
        return await loads_async(raw, max_depth=max_depth)
    for root, level in _request_roots(value):
        if await depth_exceeds_async(root, max_depth, level=level):
            raise too_deep(max_depth)
    return value
