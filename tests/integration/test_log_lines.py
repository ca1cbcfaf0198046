"""Log lines: with `--log-format json` every line on stderr is one JSON object, the standard
library's loggers (ADK's, aiohttp's) included; each HTTP request gets one access line whose path
has no query string."""

from __future__ import annotations

import json
import logging
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from adk_gateway.logs import configure_logging
from tests.gateway_process import running_gateway


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """configure_logging() binds structlog and the root handler to this test's captured stderr,
    which closes with the test: both are put back as they were."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    saved = structlog.get_config()
    yield None
    structlog.configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)


def test_standard_library_records_are_json(capfd: pytest.CaptureFixture[str], restore_logging: None) -> None:
    configure_logging("json", "info")
    logging.getLogger("google_adk.google.adk.runners").warning("model %s did not answer", "scripted")
    logging.getLogger("aiohttp.server").error("Error handling request", exc_info=ValueError("bad line"))

    lines = [json.loads(line) for line in capfd.readouterr().err.splitlines()]

    assert [line["event"] for line in lines] == ["model scripted did not answer", "Error handling request"]
    assert lines[0]["logger"] == "google_adk.google.adk.runners"
    assert lines[0]["level"] == "warning"
    assert "ValueError: bad line" in lines[1]["exception"]


def test_auto_is_json_when_stderr_is_not_a_terminal(capfd: pytest.CaptureFixture[str], restore_logging: None) -> None:
    configure_logging("auto", "info")
    structlog.get_logger("gateway").info("listening", url="http://127.0.0.1:8080")

    assert json.loads(capfd.readouterr().err)["event"] == "listening"


def test_values_json_cannot_hold_are_written_as_strings(
    capfd: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "<opaque>"

    configure_logging("json", "info")
    structlog.get_logger("gateway").info("odd_values", thing=Opaque(), counts={7: "seven"}, text="é \n ✓")

    line = json.loads(capfd.readouterr().err)
    assert (line["thing"], line["counts"], line["text"]) == ("<opaque>", {"7": "seven"}, "é \n ✓")


def test_a_bearer_credential_in_a_library_record_is_redacted(
    capfd: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    configure_logging("json", "info")
    logging.getLogger("aiohttp.client").warning("GET /x?access_token=secret-token-value")

    line = capfd.readouterr().err
    assert "secret-token-value" not in line
    assert json.loads(line)["logger"] == "aiohttp.client"


def test_every_line_of_a_served_request_is_json_with_an_access_line(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    with running_gateway(log=log) as url:
        body = json.dumps({"id": "chat-log", "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "/echo hi"}]}]}).encode()
        request = urllib.request.Request(f"{url}/api/chat?access_token=secret-token-value", data=body,
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert b"[DONE]" in response.read()

    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    access = [r for r in records if r.get("event") == "access" and r.get("path") == "/api/chat"]
    assert len(access) == 1
    assert access[0]["method"] == "POST"
    assert access[0]["status"] == 200
    assert access[0]["duration_ms"] >= 0
    assert "secret-token-value" not in log.read_text()
    finished = [r for r in records if r.get("event") == "run_finished"]
    assert [r["outcome"] for r in finished] == ["ok"]
    # The scripted model counts words: the prompt's and the answer's.
    assert finished[0]["usage"]["outputTokens"] == 1
    assert finished[0]["usage"]["totalTokens"] > finished[0]["usage"]["outputTokens"]


def test_python_warnings_are_json(capfd: pytest.CaptureFixture[str], restore_logging: None) -> None:
    """A library's `warnings.warn` (ADK's `[EXPERIMENTAL]` notices) is a JSON line like the rest."""
    with warnings.catch_warnings():  # (outside the test runner's own recording of warnings)
        warnings.simplefilter("default")
        configure_logging("json", "info")
        warnings.warn_explicit("[EXPERIMENTAL] something new", UserWarning, "somewhere.py", 1)
    [line] = [json.loads(text) for text in capfd.readouterr().err.splitlines()]
    assert line["logger"] == "py.warnings" and line["level"] == "warning"
    assert "[EXPERIMENTAL] something new" in line["event"]
