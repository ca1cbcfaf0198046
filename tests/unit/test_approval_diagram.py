"""The approval states drawn in docs/design/0002-approvals.md are the ones `approval.TRANSITIONS`
allows: the generated part of the document matches what docs/design/approval_states.py draws now."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from adk_gateway.core.approval import TRANSITIONS, CallEvent, CallState

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "design" / "approval_states.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("approval_states", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_document_is_not_stale(script: ModuleType) -> None:
    text = script.DOC.read_text(encoding="utf-8")
    assert script.render(text) == text, "run: python docs/design/approval_states.py"


def test_every_move_of_the_table_is_drawn(script: ModuleType) -> None:
    drawn = "\n".join(script.diagram())
    for source, moves in TRANSITIONS.items():
        for event, target in moves.items():
            arrow = f"{source.name.lower()} --> {target.name.lower()}: "
            [line] = [line for line in drawn.splitlines() if arrow in line]
            assert event.value in line.split(": ", 1)[1].split(", ")


def test_a_changed_table_makes_the_document_stale(script: ModuleType) -> None:
    text = script.DOC.read_text(encoding="utf-8")
    changed = {state: dict(moves) for state, moves in TRANSITIONS.items()}
    changed[CallState.APPROVAL_REQUESTED][CallEvent.OUTPUT] = CallState.OUTPUT_AVAILABLE
    assert script.render(text, changed) != text
    assert "approval_requested --> output_available: output" in script.generated(changed)


def test_the_check_command(script: ModuleType) -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    with pytest.raises(ValueError):
        script.render("no markers here")
