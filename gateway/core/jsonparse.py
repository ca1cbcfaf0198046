"""JSON from clients, parsed with a bound on nesting and without stalling the event loop.

Why not `json.loads`: the stdlib decoder recurses once per nesting level, so a body of 5,000
nested `[` raised `RecursionError` (a 500 over HTTP, a silently closed socket over WebSocket).
orjson parses without Python recursion and refuses documents deeper than 1,024 levels itself; the
gateway's own, smaller bound (`--max-json-depth`) is then checked on the parsed value with an
explicit stack, so no input makes anything recurse, here or in the code that walks the value later
(pydantic, `json.dumps` of tool arguments, ADK).

A chat history's earlier messages are not walked: a top-level `messages` list (the history of a
request body or a `send` frame) contributes only its last message here. The earlier ones are
never read unless the chat is imported or rebuilt from them, and `gateway.core.requests` checks their
depth then (`validated_history`): a turn costs what is new in the history, not its length.

Large inputs: orjson itself is fast (about 10 ms per MiB, holding the GIL, so a worker thread
would not free the loop), but the depth walk is Python and costs about 40 ms per MiB.
`loads_async` walks in slices of a few milliseconds and lets the loop run between them. Slicing on
the loop, not a thread: a CPU-bound thread makes every socket call of the loop wait for the GIL.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any, Final

import orjson

__all__ = ["SLICE_S", "JsonRejected", "depth_exceeds", "depth_exceeds_async", "loads", "loads_async", "too_deep"]

# Longest stretch of CPU work on the event loop before it is given back (seconds).
SLICE_S: Final = 0.004
# Inputs up to this size are checked in one go (well under one slice).
SMALL_BYTES: Final = 32 * 1024


class JsonRejected(ValueError):
    """The input is not JSON the gateway accepts; `reason` is "syntax" or "depth"."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


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


async def depth_exceeds_async(value: Any, max_depth: int) -> bool:
    """`depth_exceeds`, giving the loop back every `SLICE_S`."""
    if not _is_container(value):
        return False
    started = time.perf_counter()
    for index, exceeded in enumerate(_walk(value, max_depth)):
        if exceeded:
            return True
        if index % 512 == 511 and time.perf_counter() - started > SLICE_S:
            await asyncio.sleep(0)
            started = time.perf_counter()
    return False


def _parse(raw: bytes | bytearray | memoryview | str, max_depth: int) -> Any:
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
