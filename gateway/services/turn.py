"""Running one planned chat turn: the agent's events in, the message's chunks out.

How it works
------------
A `ChatTurn` is one run of the agent for one request, planned by `adk_gateway.services.planning`.
`execute()` feeds the run's events to the message's converter (`adk_gateway.core.converter`, the one
writer of chunks) and appends what it writes to the chat's stream log; transports follow that
log. The converter's effects are carried out here: a call to approve is asked through the chat's
`ApprovalBook` (which also records each tool result, so a call shows one outcome), a call the
client answers is tracked in it, and the extras the chat service has (sign-ins, artifact links)
are handed to it. The book is saved to the session before the final chunk — `finish`, and also
`error` and `abort` when the run fails or is stopped — so a client that answers an approval it
received finds it stored. `outcome` says how the run ended, for the run's metrics and span.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from collections.abc import Iterable
from contextlib import aclosing
from typing import Any, Protocol

import structlog

from adk_gateway.agents.adk import AgentHost, ModelCallsExhausted
from adk_gateway.agents.tools import APPROVALS_STATE_KEY
from adk_gateway.core.approval import ToolPolicy
from adk_gateway.core.chunks import Chunk
from adk_gateway.core.converter import AGENT_FAILED, MessageConverter, raised_in_agent
from adk_gateway.core.effects import ArtifactSaved, CallAnnounced, Effect, NeedsApproval, SignInRequested
from adk_gateway.core.errors import GatewayError, ModelTimedOut
from adk_gateway.core.events import AgentEvent
from adk_gateway.core.pacing import Pacer
from adk_gateway.core.transcript import MessageFold
from adk_gateway.metrics import Metrics
from adk_gateway.services.planning import TURN_STATE_KEY, RequestContext, TurnPlan, now_ms
from adk_gateway.services.registry import ChatRun

__all__ = ["ChatTurn", "TurnExtras", "told_safely"]

log = structlog.get_logger("adk_gateway.services.chat")


def _new_approval_id() -> str:
    return f"apr-{secrets.token_urlsafe(18)}"


class TurnExtras(Protocol):
    """What a turn hands the chat service's other parts: effects the converter's message shows
    with something only they have (a sign-in's link, an artifact's signed URL)."""

    async def fill_in(self, turn: ChatTurn, effect: SignInRequested | ArtifactSaved) -> None: ...


class ChatTurn:
    """One planned turn's run; see the module docstring."""

    def __init__(
        self,
        host: AgentHost,
        run: ChatRun,
        plan: TurnPlan,
        ctx: RequestContext,
        chat_id: str,
        *,
        metrics: Metrics,
        extras: TurnExtras | None = None,
        converter: MessageConverter | None = None,
    ) -> None:
        self.host = host
        self.run = run
        self.plan = plan
        self.book = plan.book
        self.turn = plan.turn
        self.ctx = ctx
        self.chat_id = chat_id
        self.metrics = metrics
        self.extras = extras
        book = self.book
        self.converter = converter or MessageConverter(
            plan.message_id, tools=lambda name: book.shown_kind(name, host.tool_kind(name)), reported=book.reported,
            agent=self.turn.get("agent"), usage=self.turn.get("usage"), created_at=self.turn.get("createdAt"),
            client_state_keys=plan.client_state_keys, client_state=plan.client_state,
        )
        self.outcome = "ok"
        # The message as the client holds it, folded as it is sent (the chat's record keeps it),
        # and the approval audit's entries of this turn.
        self.fold = MessageFold(plan.continued, message_id=plan.message_id, max_text=run.log.max_bytes)
        self.audit: list[dict[str, Any]] = list(plan.audit)
        self.invocation_id: str | None = self.turn.get("invocation")
        self._inputs: dict[str, Any] = {}  # announced calls' inputs, for the audit
        self.pacer = Pacer()

    def emit(self, chunks: Iterable[Chunk]) -> None:
        """Logs chunks for the client, and folds them into the message the chat's record keeps."""
        append, fold = self.run.log.append, self.fold.apply
        for chunk in chunks:
            wire = chunk.to_wire()
            append(wire)
            fold(wire)

    async def _end(self, chunks: list[Chunk], *, stopping: bool = False, quietly: bool = False) -> None:
        """The message's last chunks: folded and saved with the chat's record (and the approval
        book) first, so that what the client receives is stored, then logged."""
        wires = [chunk.to_wire() for chunk in chunks]
        for wire in wires:
            self.fold.apply(wire)
        if stopping:
            await self._save_while_stopping()
        elif quietly:
            await self._save_quietly()
        else:
            try:
                await self._save()
            except Exception:
                # Not stored, so not sent: the failure's `error` chunk ends the message instead.
                self.converter.unsend_end()
                raise
        for wire in wires:
            self.run.log.append(wire)

    def begin(self) -> None:
        """Logs the answer's first chunks: `start`, and what the plan shows before anything runs."""
        self.run.recorded_ahead = self.plan.recorded
        self.emit(self.converter.start())
        if self.plan.requested_state:
            self.emit(self.converter.client_state(self.plan.requested_state))
        self.emit(self.converter.show(self.plan.shown))

    async def execute(self) -> None:
        """Runs the planned turn (`begin` has logged its first chunks)."""
        host = self.host
        started = time.monotonic()
        try:
            # The run's latest event waits for the turn's record, which rides on it (one event less
            # a turn: `adk_gateway.agents.held_events`).
            async with host.holding(self.ctx.user_id, self.chat_id):
                await self._execute()
        finally:
            if self.converter.errored and self.outcome == "ok":
                self.outcome = "model_error"
            self.run.log.close()
            # One line per run: who, which chat, how it ended, how long it took and the tokens it
            # used (never the prompt).
            log.info("run_finished", user_id=self.ctx.user_id, chat_id=self.chat_id, app=host.app_name,
                     outcome=self.outcome, duration_ms=round((time.monotonic() - started) * 1000, 1),
                     detached=self.run.detached, usage=self.converter.usage)

    async def _execute(self) -> None:
        host, plan, converter, ctx, chat_id = self.host, self.plan, self.converter, self.ctx, self.chat_id
        try:
            for call_id in plan.awaiting_client:
                converter.await_client(call_id)
            if plan.interrupted:
                await host.append_replies(ctx.user_id, chat_id, plan.interrupt_responses)
                await self._end(converter.finish("interrupted"))
                return
            if plan.new_message is not None:
                await self._run_agent(plan.new_message)
            self._remember_message()
            # One write a turn: the book, the turn's bookkeeping and the chat's record, together.
            await self._end(converter.finish())
        except ModelCallsExhausted:
            self.outcome = "limit"
            log.warning("llm_call_limit", chat_id=chat_id, limit=host.max_llm_calls)
            await self._end(converter.finish("length", {"finishDetail": "max_llm_calls"}), quietly=True)
        except asyncio.CancelledError:
            if self.run.stopped_because is not None:  # stopped by the gateway, not by the user
                self.outcome = "lease_lost"
                await self._end(converter.error(self.run.stopped_because), stopping=True)
            else:
                self.outcome = "stopped"
                await self._end(converter.abort("stopped"), stopping=True)
            raise
        except Exception as exc:
            # A bound that fired (model or store timeout) says so; anything else is a bug or an
            # agent failure, logged with its traceback and told to the client in general terms.
            known = _gateway_error(exc)
            if known is None:
                self.outcome, text = "error", AGENT_FAILED
                log.exception("run_failed", chat_id=chat_id, error=repr(exc))
            else:
                self.outcome = "timeout" if isinstance(known, ModelTimedOut) else known.error_code
                text = known.message
                log.warning("run_failed", chat_id=chat_id, code=known.error_code, detail=known.detail)
            await self._end(converter.error(text), quietly=True)

    async def _run_agent(self, new_message: Any) -> None:
        # ADK hands over the events a model yields without waiting in between: a model that does
        # not wait between tokens would have the whole answer converted before the handler writes
        # its first token. Giving way once, after the first event that logged chunks, sends that
        # token at once; the rest goes out at the run's next wait. A stop can now land between
        # events too, so the run's generator is closed explicitly.
        # The pacer goes on from there: the run gives the loop a turn every few events (a model
        # that never waits would otherwise hold the whole process, `adk_gateway.agents.pacing`).
        run, pacer = self.run, self.pacer
        log = run.log
        logged = log.end
        waiting_for_first = True
        events = self.host.run(self.ctx.user_id, self.chat_id, new_message, state_delta=self.plan.state_delta)
        with self.host.paced_by(self.ctx.user_id, self.chat_id, log):
            async with aclosing(events):
                async for event in events:
                    effects = self._convert(event)
                    if effects:
                        await self._hand_to_extras(effects)
                    if waiting_for_first:
                        if log.end > logged:
                            waiting_for_first = False
                            await pacer.turn()
                    else:
                        await pacer.step()
                    if log.behind():  # a reader the process kept busy: wait for it, do not outrun it
                        await log.readers_caught_up()

    def _convert(self, event: AgentEvent) -> list[Effect]:
        """Logs the event's chunks and carries out what the approval book decides about them;
        returns the effects that need more than the book (I/O)."""
        if raised_in_agent(event):
            event = told_safely(event, self.chat_id)
        if self.invocation_id is None and event.invocation_id:
            self.invocation_id = event.invocation_id
        result = self.converter.convert(event)
        self.emit(result.chunks)
        later: list[Effect] = []
        book = self.book
        for effect in result.effects:
            if isinstance(effect, NeedsApproval):
                self._ask(effect.tool_call_id, effect.tool_name, effect.confirmation_id)
            elif isinstance(effect, CallAnnounced):
                self._inputs[effect.tool_call_id] = effect.input
                if not effect.client:
                    continue
                # The client answers the call: the user is asked first, or the browser runs it (or
                # the app answers a long-running tool) unasked.
                kind = self.host.tool_kind(effect.tool_name)
                if kind.browser and book.policy(effect.tool_name, needs_approval=kind.needs_approval) is ToolPolicy.ASK:
                    self._ask(effect.tool_call_id, effect.tool_name, None)
                else:
                    book.track(effect.tool_call_id, effect.tool_name, browser=True)
                    self.turn["asks"] = self.turn.get("asks", 0) + 1
            else:
                later.append(effect)
        return later

    async def _hand_to_extras(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, SignInRequested | ArtifactSaved) and self.extras is not None:
                await self.extras.fill_in(self, effect)

    def _ask(self, tool_call_id: str, tool_name: str, confirmation_id: str | None) -> None:
        """The user is asked to approve a call: ADK's confirmation of a server tool
        (`confirmation_id`), or a browser tool."""
        ask = self.book.ask(
            tool_call_id, tool_name, browser=confirmation_id is None, confirmation_id=confirmation_id,
            approval_id=_new_approval_id(), now=time.time(),
        )
        if ask is None:
            return
        self.turn["asks"] = self.turn.get("asks", 0) + 1
        if ask.approval_id is not None:
            self.audit.append({"toolCallId": tool_call_id, "tool": tool_name,
                               "input": self._inputs.get(tool_call_id), "askedAt": now_ms()})
        # Without an approval id the tool is "always allowed" in this chat: not asked. The call is
        # announced as a browser tool to run now, and a page that answered "always" runs it at once
        # (ai 6 has no chunk for an automatic approval; ai 7's request + response pair would cost
        # an extra round trip before the browser may run it).
        if ask.approval_id is not None:
            self.metrics.approvals_issued.inc()
        self.emit(self.converter.show([ask]))

    # --- the session's state -------------------------------------------------------------------

    def _remember_message(self) -> None:
        """A message that waits for the client is continued by another response: what its end
        reports (its agent, its usage so far) and its run (the record's invocation) are kept for
        that one."""
        converter = self.converter
        if converter.awaiting_client:
            if self.invocation_id:
                self.turn["invocation"] = self.invocation_id
            if converter.agent:
                self.turn["agent"] = converter.agent
            if converter.usage:
                self.turn["usage"] = converter.usage

    async def _save(self) -> None:
        """The book, the turn's bookkeeping, and the chat's record of this turn: its messages as
        the client holds them, and its approval audit."""
        record: dict[str, Any] = {"messages": [*self.plan.recorded, self.fold.message()]}
        if self.audit:
            record["approvals"] = self.audit
        await self.host.save_state(self.ctx.user_id, self.chat_id,
                                   {APPROVALS_STATE_KEY: self.book.to_state(), TURN_STATE_KEY: self.turn},
                                   record=record, invocation_id=self.invocation_id)

    async def _save_quietly(self) -> None:
        try:
            await self._save()
        except Exception as exc:
            log.warning("state_save_failed", chat_id=self.chat_id, error=repr(exc))

    async def _save_while_stopping(self) -> None:
        """Saves the book of a run being stopped: approvals its client already received stay
        answerable. The save (bounded by the store timeout) is shielded: a second cancellation,
        e.g. at shutdown, stops the wait for it, not the save."""
        save = asyncio.ensure_future(self._save_quietly())
        try:
            await asyncio.shield(save)
        except asyncio.CancelledError:
            log.info("state_save_continues_after_stop", chat_id=self.chat_id)


def told_safely(event: AgentEvent, chat_id: str) -> AgentEvent:
    """An error event from an exception in the agent's code, as the client is told of it: a
    general message and an id; the log line with the same id has the exception's own text."""
    error_id = f"err-{secrets.token_hex(6)}"
    log.warning("agent_error", chat_id=chat_id, error_id=error_id, code=event.error_code, detail=event.error_message)
    return dataclasses.replace(event, error_message=f"{AGENT_FAILED} (error {error_id})")


def _gateway_error(exc: BaseException) -> GatewayError | None:
    """The `GatewayError` behind a run failure (ADK may wrap what a store or plugin raised)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, GatewayError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


