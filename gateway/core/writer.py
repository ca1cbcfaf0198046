"""One UI message, written as chunks: the only place that keeps a message's part bookkeeping.

How it works
------------
A `MessageWriter` is told what happens in one assistant message — text, thoughts, tool calls and
their outcomes, files, data — and hands the chunks that say so, in order, to its `emit`. It
keeps what the AI SDK's stream reader needs to be true and nothing else:

- the message opens with `start` (once, before anything else; `started=True` for a message whose
  `start` was sent by someone else, e.g. a replayed prefix);
- model output sits in steps: `start-step` … `finish-step`, never nested; text, reasoning, tool
  calls and files open a step when none is open;
- text and reasoning stream as deltas into the one open part, with ids unique in the message
  (`{kind}-{scope}-{n}`; `scope` is the caller's, e.g. the model call's id). A delta of the other
  kind ends it and opens a new part; every other part, a step's end and the message's end close it;
- the message ends once, with `finish` (its usage, when counted, as metadata) or with a final
  `error`. After that every call is a no-op: the client stops reading at the end.

Pure: no I/O, no asyncio. The chat converter and live mode both write through it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

from adk_gateway.core import chunks as c
from adk_gateway.core.events import Usage

__all__ = ["Emit", "MessageWriter", "json_safe"]

Emit = Callable[[c.Chunk], None]
PartKind = Literal["text", "reasoning"]

_COMPACT: Final = (",", ":")
# The chunks of a text or reasoning part, by kind.
_STARTS: Final[Mapping[PartKind, type[c.TextStart | c.ReasoningStart]]] = {
    "text": c.TextStart,
    "reasoning": c.ReasoningStart,
}
_DELTAS: Final[Mapping[PartKind, type[c.TextDelta | c.ReasoningDelta]]] = {
    "text": c.TextDelta,
    "reasoning": c.ReasoningDelta,
}
_ENDS: Final[Mapping[PartKind, type[c.TextEnd | c.ReasoningEnd]]] = {
    "text": c.TextEnd,
    "reasoning": c.ReasoningEnd,
}


def json_safe(value: Any) -> Any:
    """`value` as plain JSON values (anything JSON cannot hold becomes its `str`)."""
    return json.loads(json.dumps(value, default=str))


class MessageWriter:
    """Writes one UI message; see the module docstring."""

    __slots__ = ("_emit", "_in_step", "_open", "_parts", "_usage", "ended", "errored", "message_id", "scope",
                 "started")

    def __init__(self, emit: Emit, *, message_id: str | None = None, scope: str | None = None,
                 started: bool = False) -> None:
        self._emit = emit
        self.message_id = message_id
        self.scope = scope or message_id or "x"  # the middle of part ids
        self.started = started
        self.ended = False  # `finish` or a final `error` was written
        self.errored = False  # ... and it was an `error`
        self._in_step = False
        self._open: tuple[PartKind, str] | None = None  # the open text or reasoning part: (kind, id)
        self._parts = 0  # part ids issued
        self._usage: dict[str, int] | None = None

    @property
    def in_step(self) -> bool:
        return self._in_step

    def next_id(self, kind: str) -> str:
        """A new id, unique in this message (for parts, and calls the model left without one)."""
        self._parts += 1
        return f"{kind}-{self.scope}-{self._parts}"

    # --- the message and its steps ---------------------------------------------------------------

    def start(self, metadata: Any = None) -> None:
        if not self.started and not self.ended:
            self.started = True
            self._emit(c.Start(messageId=self.message_id, messageMetadata=metadata))

    def start_step(self) -> None:
        """Opens a step unless one is open."""
        if self.ended or self._in_step:
            return
        self.start()
        self._in_step = True
        self._emit(c.StartStep())

    def finish_step(self) -> None:
        """Closes the open parts and the step, if one is open."""
        if self.ended:
            return
        self.close_parts()
        if self._in_step:
            self._in_step = False
            self._emit(c.FinishStep())

    @property
    def usage(self) -> dict[str, int]:
        """The tokens counted so far, in the AI SDK's names (empty when the model reported none)."""
        return dict(self._usage or {})

    def add_usage(self, usage: Usage) -> None:
        """Counts a model response's tokens into the usage `finish` reports."""
        totals = self._usage
        if totals is None:
            totals = self._usage = {}
        for key, value in (("inputTokens", usage.input_tokens), ("outputTokens", usage.output_tokens),
                           ("totalTokens", usage.total_tokens)):
            if value:
                totals[key] = totals.get(key, 0) + value

    def finish(self, reason: c.FinishReason, metadata: Any = None) -> None:
        """Ends the message: closes what is open, then `finish` (metadata: the usage, unless given)."""
        if self.ended:
            return
        self.start()
        self.finish_step()
        if metadata is None and self._usage:
            metadata = {"usage": dict(self._usage)}
        self.ended = True
        self._emit(c.Finish(finishReason=reason, messageMetadata=metadata))

    def unsend_end(self) -> None:
        """The message's end (`finish`) was written but will not be sent (saving what it ends
        failed): the message is open again, for the `error` that tells of the failure."""
        self.ended = self.errored = False

    def error(self, text: str, *, final: bool = True) -> None:
        """An `error` chunk, after closing the open parts. `final`: it ends the message (a chat
        response); otherwise the message goes on and still ends with `finish` (a live turn)."""
        if self.ended:
            return
        self.start()
        self.close_parts()
        if final:
            self.ended = self.errored = True
        self._emit(c.Error(errorText=text))

    def abort(self, reason: str | None = None) -> None:
        """Ends a message that was stopped: `abort` (the client keeps what it received)."""
        if self.ended:
            return
        self.start()
        self.close_parts()
        self.ended = True
        self._emit(c.Abort(reason=reason))

    # --- text and reasoning ----------------------------------------------------------------------

    def text(self, delta: str) -> None:
        """Streams text into the open text part (opening one, and a step, if needed)."""
        self._delta("text", delta)

    def reasoning(self, delta: str) -> None:
        """Streams a thought into the open reasoning part (opening one, and a step, if needed)."""
        self._delta("reasoning", delta)

    def end_text(self) -> None:
        if self._open is not None and self._open[0] == "text":
            self.close_parts()

    def end_reasoning(self) -> None:
        if self._open is not None and self._open[0] == "reasoning":
            self.close_parts()

    def close_parts(self) -> None:
        """Ends the open text or reasoning part (the next delta opens a new one)."""
        if self._open is not None:
            (kind, part_id), self._open = self._open, None
            self._emit(_ENDS[kind](id=part_id))

    def _delta(self, kind: PartKind, delta: str) -> None:
        if not delta or self.ended:
            return
        self.start_step()
        if self._open is not None and self._open[0] != kind:
            self.close_parts()  # one part is open at a time: text ends thoughts and thoughts text
        if self._open is None:
            self._open = (kind, self.next_id(kind))
            self._emit(_STARTS[kind](id=self._open[1]))
        self._emit(_DELTAS[kind](id=self._open[1], delta=delta))

    # --- tools -----------------------------------------------------------------------------------

    def tool_call(self, call_id: str, name: str, args: Mapping[str, Any], *, provider_executed: bool) -> Any:
        """Announces a call whose input is complete: input start, the input as one delta, input
        available. `provider_executed`: the server runs it (a browser tool: the client does).
        Returns the input as announced (plain JSON values)."""
        text = json.dumps(args, default=str, separators=_COMPACT)
        announced = json.loads(text)
        if self.ended:
            return announced
        self.start_step()
        self.close_parts()
        executed = True if provider_executed else None
        self._emit(c.ToolInputStart(toolCallId=call_id, toolName=name, providerExecuted=executed))
        self._emit(c.ToolInputDelta(toolCallId=call_id, inputTextDelta=text))
        self._emit(c.ToolInputAvailable(toolCallId=call_id, toolName=name, input=announced,
                                        providerExecuted=executed))
        return announced

    def tool_input_available(self, call_id: str, name: str, args: Any, *, provider_executed: bool = False,
                             dynamic: bool = False) -> None:
        """(Re-)announces a call already known to the client, e.g. an approved browser tool to run now."""
        if self.ended:
            return
        self.start()
        self.close_parts()
        self._emit(c.ToolInputAvailable(toolCallId=call_id, toolName=name, input=args,
                                        providerExecuted=True if provider_executed else None,
                                        dynamic=True if dynamic else None))

    def approval_request(self, approval_id: str, call_id: str) -> None:
        if self.ended:
            return
        self.start()
        self.close_parts()
        self._emit(c.ToolApprovalRequest(approvalId=approval_id, toolCallId=call_id))

    def tool_output(self, call_id: str, output: Any, *, provider_executed: bool) -> None:
        if self.ended:
            return
        self.start()
        self.close_parts()
        self._emit(c.ToolOutputAvailable(toolCallId=call_id, output=json_safe(output),
                                         providerExecuted=True if provider_executed else None))

    def tool_error(self, call_id: str, text: str, *, provider_executed: bool) -> None:
        if self.ended:
            return
        self.start()
        self.close_parts()
        self._emit(c.ToolOutputError(toolCallId=call_id, errorText=text,
                                     providerExecuted=True if provider_executed else None))

    def tool_denied(self, call_id: str) -> None:
        if self.ended:
            return
        self.start()
        self.close_parts()
        self._emit(c.ToolOutputDenied(toolCallId=call_id))

    # --- sources, files and data ------------------------------------------------------------------

    def source_url(self, source_id: str, url: str, title: str | None = None) -> None:
        if self.ended:
            return
        self.start_step()
        self.close_parts()
        self._emit(c.SourceUrl(sourceId=source_id, url=url, title=title or None))

    def source_document(self, source_id: str, title: str, media_type: str = "text/plain") -> None:
        if self.ended:
            return
        self.start_step()
        self.close_parts()
        self._emit(c.SourceDocument(sourceId=source_id, mediaType=media_type, title=title))

    def file(self, url: str, media_type: str) -> None:
        if self.ended:
            return
        self.start_step()
        self.close_parts()
        self._emit(c.File(url=url, mediaType=media_type))

    def data(self, name: str, data: Any, *, part_id: str | None = None, transient: bool = False) -> None:
        """A `data-{name}` part (with `part_id`: replaces the earlier one with that id). Open text
        parts stay open: data streams beside them (a transcript and its audio)."""
        if self.ended:
            return
        self.start()
        self._emit(c.Data(name=name, data=data, id=part_id, transient=True if transient else None))
