"""Prometheus metrics of one app, in their own registry (no module globals; tests build many apps)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["Metrics"]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("adk_gateway_requests", "Chat requests by transport", ["transport"], registry=r)
        self.request_errors = Counter(
            "adk_gateway_request_errors", "Requests refused before streaming", ["code"], registry=r
        )
        self.runs_started = Counter("adk_gateway_runs_started", "Agent runs started", registry=r)
        self.runs_finished = Counter("adk_gateway_runs_finished", "Agent runs ended", ["outcome"], registry=r)
        self.run_seconds = Histogram(
            "adk_gateway_run_seconds", "Agent run duration",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60), registry=r,
        )
        self.live_sessions_started = Counter(
            "adk_gateway_live_sessions_started", "Live (audio) sessions started", registry=r
        )
        self.live_sessions_finished = Counter(
            "adk_gateway_live_sessions_finished",
            "Live sessions ended: ok (stopped by the client or ended by the agent), stopped (a disconnect, "
            "a chat stop or shutdown), error", ["outcome"], registry=r,
        )
        self.live_session_seconds = Histogram(
            "adk_gateway_live_session_seconds", "Live session duration",
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600), registry=r,
        )
        self.approvals_issued = Counter("adk_gateway_approvals_issued", "Approvals asked", registry=r)
        self.sessions_rebuilt = Counter(
            "adk_gateway_sessions_rebuilt",
            "Chat sessions rebuilt from a posted history that did not continue them (edit, regenerate, other)",
            ["reason"], registry=r,
        )
        self.approvals_answered = Counter(
            "adk_gateway_approvals_answered", "Approvals answered", ["decision"], registry=r
        )
        self.approvals_refused = Counter(
            "adk_gateway_approvals_refused", "Forged, foreign or replayed approvals", registry=r
        )
        self.auth_refused = Counter(
            "adk_gateway_auth_refused", "Requests refused before a handler ran, by reason", ["reason"], registry=r
        )
        self.drained_runs = Counter(
            "adk_gateway_drained_runs", "Runs open at shutdown: finished in the grace, or stopped", ["outcome"],
            registry=r,
        )
        self.rejections = Counter(
            "adk_gateway_rejections", "Requests refused by a cap before anything streamed, by cap", ["reason"],
            registry=r,
        )
        self.timeouts = Counter(
            "adk_gateway_timeouts", "Bounds that fired: model call, tool call, session store, cancellation",
            ["kind"], registry=r,
        )
        self.memory_evictions = Counter(
            "adk_gateway_memory_evictions", "memory:// chats dropped, idle past the TTL or least recently used",
            ["reason"], registry=r,
        )
        self.slow_readers_cut = Counter(
            "adk_gateway_slow_readers_cut", "Connections cut for not reading their stream fast enough, by reason "
            "(pending, stalled, overrun)", ["transport", "reason"], registry=r,
        )
        self.connections = Gauge("adk_gateway_connections", "Open connections", ["kind"], registry=r)
        self.active_runs = Gauge("adk_gateway_active_runs", "Runs in progress", registry=r)
        self.ws_frames_refused = Counter(
            "adk_gateway_ws_frames_refused", "WebSocket frames refused", ["reason"], registry=r
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
