"""A chat's messages as the client holds them: the AI SDK's reading of a UI message stream, in
Python. Pure: no I/O, no asyncio.

`fold(message, chunks)` applies a response's chunks (wire dicts) to an assistant message the way
the AI SDK's `processUIMessageStream` does (`ai` 7.0, which `ai` 6 matches for every chunk the
gateway sends): `start` sets the id and merges metadata, `start-step` pushes a `step-start` part,
text and reasoning parts open, grow and end with `state: "done"`, tool parts move through their
states, data parts with an id are replaced in place, transient ones are not kept, and `finish`
merges its metadata. Fields the client leaves undefined are absent here, so the result is the
client's message as JSON. A continuation folds onto the message the client posted (with its
answers), exactly as the client folds onto the one it holds.

`Transcript` rebuilds a chat's messages from what the chat service recorded in the session: a
record per run, in order, each carrying the messages it wrote (a message written again replaces
its earlier version, where it stood) and the run's invocation; a rewind drops the records from
the first of the invocation it rewinds to (ADK keeps rewound events, and skips them the same way).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["MessageFold", "Record", "Transcript", "approval_audit", "fold", "merge_metadata"]

_TOOL_FIELDS: Final = ("input", "output", "errorText", "rawInput", "preliminary", "title", "toolMetadata",
                       "providerExecuted")
_MISSING: Final = object()


def json_copy(value: Any) -> Any:
    """A copy of a JSON value: its objects and arrays copied, the rest (immutable) shared. What
    `copy.deepcopy` gives for the wire's values, at a fraction of its cost."""
    if isinstance(value, dict):
        return {key: json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_copy(item) for item in value]
    if isinstance(value, tuple):
        return tuple(json_copy(item) for item in value)
    return value


def merge_metadata(base: Any, overrides: Any) -> Any:
    """The AI SDK's `mergeObjects`: objects merged key by key, anything else replaced."""
    if overrides is None:
        return base
    if not isinstance(base, dict) or not isinstance(overrides, dict):
        return overrides
    merged = dict(base)
    for key, value in overrides.items():
        current = merged.get(key)
        merged[key] = merge_metadata(current, value) if isinstance(value, dict) and isinstance(current, dict) \
            else value
    return merged


def _set(part: dict[str, Any], key: str, value: Any) -> None:
    """A field the client sets: undefined (`_MISSING`) leaves it absent."""
    if value is _MISSING:
        part.pop(key, None)
    else:
        part[key] = value


def _tool_name(part: Mapping[str, Any]) -> str | None:
    kind = str(part.get("type", ""))
    if kind == "dynamic-tool":
        return str(part.get("toolName"))
    return kind[5:] if kind.startswith("tool-") else None


class MessageFold:
    """One response folded into one message, as it streams (the client's streaming state).

    `apply` each chunk as it is sent, `message()` at any point: a text part's deltas are kept as
    pieces and joined when the part ends (or is read), so a long answer folds in linear time.
    `max_text`: the most text (and reasoning) kept, in characters; past it the deltas are
    dropped (`truncated`), so what the fold holds stays within the response's stream budget.
    """

    def __init__(self, message: Mapping[str, Any] | None = None, *, message_id: str | None = None,
                 max_text: int = 0) -> None:
        base: dict[str, Any] = json_copy(dict(message)) if message is not None else \
            {"id": message_id or "", "role": "assistant", "parts": []}
        base.setdefault("parts", [])
        self._message = base
        self.parts: list[dict[str, Any]] = base["parts"]
        self.text: dict[str, dict[str, Any]] = {}
        self.reasoning: dict[str, dict[str, Any]] = {}
        self.pieces: dict[int, list[str]] = {}  # id(part) -> its deltas not joined yet
        self.partial_calls: dict[str, dict[str, Any]] = {}
        self.max_text = max_text  # 0: no limit
        self.kept_text = 0
        self.truncated = False

    def message(self) -> dict[str, Any]:
        """The message so far (a part still streaming has the text received)."""
        for part in (*self.text.values(), *self.reasoning.values()):
            self._join(part)
        return self._message

    def _join(self, part: dict[str, Any]) -> None:
        pieces = self.pieces.pop(id(part), None)
        if pieces:
            part["text"] += "".join(pieces)

    def _step_parts(self) -> list[dict[str, Any]]:
        index = len(self.parts) - 1
        while index >= 0 and self.parts[index].get("type") != "step-start":
            index -= 1
        return self.parts[index + 1:]

    def _tool(self, call_id: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = None
        for part in (*self._step_parts(), *reversed(self.parts)):
            if _tool_name(part) is not None and part.get("toolCallId") == call_id:
                found = part
                break
        return found

    def _update_tool(self, call_id: str, name: str, state: str, values: Mapping[str, Any],
                     existing: dict[str, Any] | None = None) -> None:
        part = existing
        if part is None:
            part = next((p for p in self._step_parts() if str(p.get("type", "")).startswith("tool-")
                         and p.get("toolCallId") == call_id), None)
        if part is not None:
            part["state"] = state
            part["type"] = f"tool-{name}"
            for key in ("input", "output", "errorText", "rawInput", "preliminary"):
                _set(part, key, values.get(key, _MISSING))
            for key in ("title", "toolMetadata"):
                if values.get(key, _MISSING) is not _MISSING:
                    part[key] = values[key]
            executed = values.get("providerExecuted", _MISSING)
            if executed is not _MISSING:
                part["providerExecuted"] = executed
            return
        new: dict[str, Any] = {"type": f"tool-{name}", "toolCallId": call_id, "state": state}
        for key in _TOOL_FIELDS:
            value = values.get(key, _MISSING)
            if value is not _MISSING:
                new[key] = value
        self.parts.append(new)

    def apply(self, chunk: Mapping[str, Any]) -> None:
        kind = chunk.get("type")
        if kind == "start":
            if chunk.get("messageId") is not None:
                self._message["id"] = chunk["messageId"]
            self._metadata(chunk.get("messageMetadata"))
        elif kind in ("finish", "message-metadata"):
            self._metadata(chunk.get("messageMetadata"))
        elif kind == "start-step":
            self.parts.append({"type": "step-start"})
        elif kind in ("text-start", "reasoning-start"):
            part: dict[str, Any] = {"type": "text", "text": "", "state": "streaming"} if kind == "text-start" \
                else {"type": "reasoning", "id": chunk["id"], "text": "", "state": "streaming"}
            if chunk.get("providerMetadata") is not None:
                part["providerMetadata"] = chunk["providerMetadata"]
            (self.text if kind == "text-start" else self.reasoning)[chunk["id"]] = part
            self.parts.append(part)
        elif kind in ("text-delta", "reasoning-delta"):
            active = (self.text if kind == "text-delta" else self.reasoning).get(chunk["id"])
            if active is not None:
                delta = chunk.get("delta", "")
                self.kept_text += len(delta)
                if self.max_text and self.kept_text > self.max_text:
                    self.truncated = True
                    return
                self.pieces.setdefault(id(active), []).append(delta)
        elif kind in ("text-end", "reasoning-end"):
            active = (self.text if kind == "text-end" else self.reasoning).pop(chunk["id"], None)
            if active is not None:
                self._join(active)
                active["state"] = "done"
                if chunk.get("citations") is not None:
                    active["citations"] = chunk["citations"]
        elif kind in ("file", "reasoning-file"):
            self.parts.append(_without_none({"type": kind, "mediaType": chunk.get("mediaType"), "url": chunk.get("url"),
                                              "providerMetadata": chunk.get("providerMetadata")}))
        elif kind in ("source-url", "source-document"):
            self.parts.append({key: value for key, value in chunk.items() if value is not None})
        elif kind in ("tool-input-start", "tool-input-delta", "tool-input-available", "tool-input-error"):
            self._tool_input(chunk)
        elif kind in ("tool-approval-request", "tool-approval-response", "tool-output-denied",
                      "tool-output-available", "tool-output-error"):
            self._tool_outcome(chunk)
        elif isinstance(kind, str) and kind.startswith("data-") and not chunk.get("transient"):
            data_id = chunk.get("id")
            existing = next((p for p in self.parts if data_id is not None and p.get("type") == kind
                             and p.get("id") == data_id), None) if data_id is not None else None
            if existing is not None:
                existing["data"] = json_copy(chunk.get("data"))
            else:
                self.parts.append(json_copy(dict(chunk)))
        # (finish-step, error, abort and transient data change nothing the client keeps)

    def _metadata(self, metadata: Any) -> None:
        if metadata is not None:
            current = self._message.get("metadata")
            self._message["metadata"] = merge_metadata(current, metadata) if current is not None \
                else json_copy(metadata)

    def _tool_input(self, chunk: Mapping[str, Any]) -> None:
        kind, call_id, name = chunk["type"], chunk["toolCallId"], chunk.get("toolName", "")
        if kind == "tool-input-start":
            self.partial_calls[call_id] = {"text": "", "toolName": name}
            self._update_tool(call_id, name, "input-streaming",
                              _given(chunk, "providerExecuted", "title", "toolMetadata"))
        elif kind == "tool-input-delta":
            partial = self.partial_calls.get(call_id)
            if partial is None:
                return
            partial["text"] += chunk.get("inputTextDelta", "")
            try:
                value: Any = json.loads(partial["text"])
            except ValueError:
                value = _MISSING
            self._update_tool(call_id, partial["toolName"], "input-streaming",
                              {"input": value, "rawInput": partial["text"]})
        elif kind == "tool-input-available":
            self._update_tool(call_id, name, "input-available",
                              {"input": chunk.get("input"), **_given(chunk, "providerExecuted", "title",
                                                                     "toolMetadata")})
        else:
            self._update_tool(call_id, name, "output-error",
                              {"input": chunk.get("input"), "errorText": chunk.get("errorText"),
                               **_given(chunk, "providerExecuted", "toolMetadata")})

    def _tool_outcome(self, chunk: Mapping[str, Any]) -> None:
        kind = chunk["type"]
        if kind == "tool-approval-response":
            part = next((p for p in self.parts if (p.get("approval") or {}).get("id") == chunk["approvalId"]), None)
            if part is None:
                return
            part["state"] = "approval-responded"
            part["approval"] = {**part["approval"], "id": chunk["approvalId"], "approved": chunk["approved"],
                                **({"reason": chunk["reason"]} if chunk.get("reason") is not None else {})}
            if chunk.get("providerExecuted") is not None:
                part["providerExecuted"] = chunk["providerExecuted"]
            return
        part = self._tool(chunk["toolCallId"])
        if part is None:
            return
        if kind == "tool-approval-request":
            part["state"] = "approval-requested"
            part["approval"] = {"id": chunk["approvalId"], **({"requestReason": chunk["reason"]}
                                                              if chunk.get("reason") is not None else {}),
                                **({"isAutomatic": True} if chunk.get("isAutomatic") is True else {}),
                                **({"signature": chunk["signature"]} if chunk.get("signature") is not None else {})}
        elif kind == "tool-output-denied":
            part["state"] = "output-denied"
        else:
            name = _tool_name(part) or ""
            values: dict[str, Any] = {"input": part.get("input", _MISSING), "title": part.get("title", _MISSING),
                                      "toolMetadata": chunk.get("toolMetadata", part.get("toolMetadata", _MISSING)),
                                      "providerExecuted": chunk.get("providerExecuted", _MISSING)}
            if kind == "tool-output-available":
                self._update_tool(part["toolCallId"], name, "output-available",
                                  {**values, "output": chunk.get("output"),
                                   "preliminary": chunk.get("preliminary", _MISSING)}, part)
            else:
                self._update_tool(part["toolCallId"], name, "output-error",
                                  {**values, "errorText": chunk.get("errorText"),
                                   "rawInput": part.get("rawInput", _MISSING)}, part)


def _given(chunk: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {key: chunk[key] for key in keys if chunk.get(key) is not None}


def _without_none(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def fold(message: Mapping[str, Any] | None, chunks: Iterable[Mapping[str, Any]], *,
         message_id: str | None = None) -> dict[str, Any]:
    """The assistant message after `chunks` (see the module docstring); `message`: the one the
    client continues (None: a new message, `message_id` its id until `start` names one)."""
    folder = MessageFold(message, message_id=message_id)
    for chunk in chunks:
        folder.apply(chunk)
    return folder.message()


@dataclass(frozen=True, slots=True)
class Record:
    """What one run recorded: its invocation, the messages it wrote (whole), and, for a rewind,
    the invocation it rewound to (records from the first of that invocation are dropped)."""

    invocation_id: str
    messages: tuple[Mapping[str, Any], ...] = ()
    rewound_to: str | None = None
    # Approvals asked or answered in the run: {"toolCallId", ...fields} (see `approval_audit`).
    approvals: tuple[Mapping[str, Any], ...] = ()


@dataclass(slots=True)
class Transcript:
    """A chat's messages rebuilt from its records, in order (see the module docstring)."""

    _kept: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)  # (invocation, message)
    _at: dict[str, int] = field(default_factory=dict)  # message id -> its index in `_kept`

    def add(self, record: Record) -> None:
        kept, at = self._kept, self._at
        if record.rewound_to is not None:
            first = next((i for i, (invocation, _) in enumerate(kept) if invocation == record.rewound_to), None)
            if first is not None:
                for _, dropped in kept[first:]:
                    at.pop(str(dropped.get("id")), None)
                del kept[first:]
            return
        for message in record.messages:
            message_id = str(message.get("id"))
            index = at.get(message_id)
            if index is None:
                at[message_id] = len(kept)
                kept.append((record.invocation_id, message))
            else:
                kept[index] = (kept[index][0], message)

    @property
    def messages(self) -> list[Mapping[str, Any]]:
        return [message for _, message in self._kept]

    @property
    def last(self) -> Mapping[str, Any] | None:
        """The chat's last message (None: no message)."""
        return self._kept[-1][1] if self._kept else None

    def invocation_of(self, message_id: str) -> str | None:
        """The invocation that first recorded the message (what a rewind to before it names)."""
        index = self._at.get(message_id)
        return self._kept[index][0] if index is not None else None

    @classmethod
    def of(cls, records: Iterable[Record]) -> Transcript:
        transcript = cls()
        for record in records:
            transcript.add(record)
        return transcript


def approval_audit(records: Iterable[Record]) -> list[dict[str, Any]]:
    """Every approval asked in a chat, in the order asked: each record's entries for a call are
    merged into that call's (a later answer adds its decision). Rewinds do not undo an audit."""
    entries: dict[str, dict[str, Any]] = {}
    for record in records:
        for entry in record.approvals:
            call_id = str(entry.get("toolCallId", ""))
            if call_id:
                entries.setdefault(call_id, {}).update(entry)
    return list(entries.values())
