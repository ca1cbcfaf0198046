"""Every run ends with one structured log line: user, chat, app, outcome and duration (never the prompt)."""

from __future__ import annotations

import json
import logging
import warnings

import pytest
import structlog
from structlog.testing import capture_logs

from gateway.keys import HOST
from gateway.logs import configure_logging

from .conftest import StartGateway
from .support import LiveStream, chat_body, new_id, post_chat, user_message, wait_for


async def test_each_run_logs_its_end_once(gateway: StartGateway) -> None:
    client = await gateway()
    answered, dropped = new_id("answered"), new_id("dropped")
    with capture_logs() as logs:
        reply = await post_chat(client, chat_body(answered, [user_message("/echo a secret prompt")]),
                                headers={"x-user-id": "carol"})
        assert reply.status == 200
        stream = await LiveStream.open(client, chat_body(dropped, [user_message("/stream 200 20")]))
        await stream.take(3)
        stream.close()  # the client goes away: the run is stopped
        await wait_for(lambda: sum(e["event"] == "run_finished" for e in logs) == 2, what="both runs to end")
    ends = {e["chat_id"]: e for e in logs if e["event"] == "run_finished"}
    assert ends[answered]["user_id"] == "carol" and ends[answered]["outcome"] == "ok"
    assert ends[dropped]["user_id"] == "anonymous" and ends[dropped]["outcome"] == "stopped"
    assert all(e["duration_ms"] >= 0 for e in ends.values())
    assert {e["app"] for e in ends.values()} == {client.app[HOST].app_name}
    assert not any("secret prompt" in str(e) for e in logs)


def test_python_warnings_are_log_lines(capsys: pytest.CaptureFixture[str]) -> None:
    """A library's `warnings.warn` (ADK's `[EXPERIMENTAL]` notices) is a JSON line like the rest."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    with warnings.catch_warnings():  # (outside the test runner's own recording of warnings)
        warnings.simplefilter("default")
        configure_logging("json", "info")
        try:
            warnings.warn_explicit("[EXPERIMENTAL] something new", UserWarning, "somewhere.py", 1)
        finally:
            logging.captureWarnings(False)
            root.handlers[:], root.level = handlers, level
            structlog.reset_defaults()
    [line] = [json.loads(text) for text in capsys.readouterr().err.splitlines() if "EXPERIMENTAL" in text]
    assert line["logger"] == "py.warnings" and line["level"] == "warning"
    assert "[EXPERIMENTAL] something new" in line["event"]
