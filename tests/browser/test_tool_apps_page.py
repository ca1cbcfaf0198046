"""The chat page's suggestions come from the app it talks to: its tools, in headless Chromium.

One gateway serves tests/browser/tool_apps, an agents folder of two apps on the offline `scripted`
model with tools of their own (garden_app: water_plants, plant_seeds(plant), harvest with
approval, ask_gardener(question) long-running; lights_app: lights_status, set_lights(room),
flash_screen in the browser with approval). tests/browser/tool_apps_page.mjs drives the page once
and reports what it saw; the tests below judge each part of that report:

- the app picker lists both apps; the suggestions are the picked app's tools, each with its badges
  (approval, browser, long-running), then the scripted model's commands; picking the other app
  shows its own, in a new chat, and a reload keeps them;
- a click on a tool without required arguments sends `/tool NAME {}` and its tool part appears; a
  tool with a required argument writes its call in the message box with that argument selected,
  sends nothing until the user completes it; a tool that needs approval asks first;
- the demo agent (the gateway's default, one app: no picker) keeps its hand-written examples.

tests/browser/suggestions_check.mjs evaluates the same rules without a browser for what the page
cannot be shown offline: an app on another model (Gemini) gets plain requests, not `/tool`.

Screenshots go to tests/browser/artifacts/tool-apps/ (their paths are printed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.page_driver import BROWSER_DIR, PageRun, run_page
from tests.gateway_process import ROOT, running_gateway
from tests.node_script import run_node_script

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

AGENTS = ROOT / "tests" / "browser" / "tool_apps"
COMMANDS = ["/echo hello", "/stream 20 50", "/think why", "/image"]


def _chip(tool: str, action: str, text: str, badges: list[str], detail: str) -> dict[str, Any]:
    """A tool's suggestion as the page script reports it."""
    return {"tool": tool, "action": action, "text": text, "badges": badges, "detail": detail}


GARDEN = [
    _chip("ask_gardener", "fill", '/tool ask_gardener {"question": ""}', ["long-running"],
          "Asks the gardener a question; the answer comes later."),
    _chip("harvest", "send", "/tool harvest {}", ["approval"], "Harvests what is ripe."),
    _chip("plant_seeds", "fill", '/tool plant_seeds {"plant": ""}', [], "Plants seeds of a plant in the garden."),
    _chip("water_plants", "send", "/tool water_plants {}", [], "Waters every plant in the garden."),
]
LIGHTS = [
    _chip("flash_screen", "send", "/tool flash_screen {}", ["approval", "browser"], "Flashes the user's screen."),
    _chip("lights_status", "send", "/tool lights_status {}", [], "Tells which lights are on."),
    _chip("set_lights", "fill", '/tool set_lights {"room": ""}', [], "Turns the lights of a room on or off."),
]
DEMO = {  # the page's hand-written examples for the demo agent on the scripted model (as before)
    "get_weather": '/tool get_weather {"location":"Paris"}',
    "process_payment": '/tool process_payment {"amount": 5, "recipient": "bob"}',
    "change_bgm": '/tool change_bgm {"track": 2}',
    "get_location": "/tool get_location {}",
}


@pytest.fixture(scope="module")
def tool_apps_gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("tool-apps-gateway") / "gateway.log"
    with running_gateway("--agent", str(AGENTS), log=log, name="tool apps gateway") as url:
        yield url


@pytest.fixture(scope="module")
def page_run(tool_apps_gateway_url: str, browser_gateway_url: str, tmp_path_factory: pytest.TempPathFactory) -> PageRun:
    workdir = tmp_path_factory.mktemp("tool-apps-page")
    config = {"url": tool_apps_gateway_url, "demoUrl": browser_gateway_url}
    return run_page("tool_apps_page.mjs", "tool-apps", config, workdir, served_from=tool_apps_gateway_url)


def test_the_run_is_clean(page_run: PageRun) -> None:
    result = page_run.result
    assert result.get("ok") and page_run.returncode == 0, page_run.report("console")
    assert not [line for line in result["console"] if " error:" in line], page_run.report("console")
    for path in result["screenshots"]:
        assert Path(path).stat().st_size > 10_000, f"screenshot {path} looks empty"


def test_the_picker_lists_both_apps(page_run: PageRun) -> None:
    assert page_run.section("picker") == {"options": ["garden_app", "lights_app"], "initial": "garden_app"}, \
        page_run.report("picker")


def _shown(suggestions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in s.items() if k != "disabled"} for s in suggestions]


@pytest.mark.parametrize(("section", "expected"), [("garden", GARDEN), ("lights", LIGHTS)])
def test_the_suggestions_are_the_apps_tools_then_the_models_commands(
    page_run: PageRun, section: str, expected: list[dict[str, Any]]
) -> None:
    suggestions = page_run.section(section, "suggestions")
    report = page_run.report(section)
    assert _shown(suggestions["tools"]) == expected, report
    assert not any(s["disabled"] for s in suggestions["tools"]), report
    assert suggestions["commands"] == COMMANDS, report
    assert suggestions["groups"] == ["Try a tool", "Try a command"], report


def test_a_tool_without_arguments_runs_on_a_click(page_run: PageRun) -> None:
    seen = page_run.section("garden", "water")
    report = page_run.report("garden")
    assert seen["userText"] == "/tool water_plants {}" and seen["apps"] == ["garden_app"], report
    assert seen["state"] == "output-available" and seen["input"] == {}, report
    assert seen["text"] == 'water_plants -> {"watered":["tomatoes","basil"]}', report


def test_a_tool_with_a_required_argument_is_written_for_the_user_to_complete(page_run: PageRun) -> None:
    fill = page_run.section("garden", "fill")
    report = page_run.report("garden")
    # Written, focused, the caret inside the argument's quotes; nothing sent.
    assert fill["value"] == '/tool plant_seeds {"plant": ""}' and fill["focused"], report
    assert fill["caret"] == len('/tool plant_seeds {"plant": "') and fill["selected"] == "", report
    assert fill["requests"] == 0 and fill["messages"] == 2, report
    assert fill["typed"] == '/tool plant_seeds {"plant": "tulips"}', report
    seen = page_run.section("garden", "plant")
    assert seen["state"] == "output-available" and seen["input"] == {"plant": "tulips"}, report
    assert seen["text"] == 'plant_seeds -> {"count":3,"planted":"tulips"}', report


def test_a_tool_that_needs_approval_asks_first(page_run: PageRun) -> None:
    report = page_run.report("garden")
    assert page_run.section("garden", "harvestAsked") == "approval-requested", report
    seen = page_run.section("garden", "harvest")
    assert seen["userText"] == "/tool harvest {}" and seen["state"] == "output-available", report
    assert seen["text"] == 'harvest -> {"harvested":["tomatoes"]}', report


def test_picking_the_other_app_switches_the_suggestions_and_runs_its_tool(page_run: PageRun) -> None:
    seen = page_run.section("lights")
    report = page_run.report("lights", "reload")
    assert seen["newChat"] and seen["url"] == "lights_app", report
    status = seen["status"]
    assert status["userText"] == "/tool lights_status {}" and status["apps"] == ["lights_app"], report
    assert status["state"] == "output-available", report
    assert status["text"] == 'lights_status -> {"off":["hall","bedroom"],"on":["kitchen"]}', report
    reload = page_run.section("reload")
    assert reload == {"app": "lights_app", "tools": ["flash_screen", "lights_status", "set_lights"], "messages": 2}, \
        report


def test_the_demo_agent_keeps_its_examples(page_run: PageRun) -> None:
    seen = page_run.section("demo")
    report = page_run.report("demo")
    assert seen["pickers"] == 0, report  # one app: no picker
    tools = seen["suggestions"]["tools"]
    assert {s["tool"]: s["text"] for s in tools} == DEMO and all(s["action"] == "send" for s in tools), report
    assert {s["tool"]: s["badges"] for s in tools} == {
        "get_weather": [], "process_payment": ["approval"], "change_bgm": ["approval", "browser"],
        "get_location": ["approval", "browser"],
    }, report
    assert seen["suggestions"]["commands"] == COMMANDS, report
    weather = seen["weather"]
    assert weather["userText"] == DEMO["get_weather"] and weather["input"] == {"location": "Paris"}, report
    assert weather["state"] == "output-available" and weather["text"].startswith("get_weather -> "), report


@pytest.mark.parametrize("state", ["garden", "lights"])
def test_accessibility(page_run: PageRun, state: str) -> None:
    violations = page_run.section("axe", state)
    serious = [v for v in violations if v["impact"] in ("serious", "critical")]
    assert not serious, json.dumps(serious, indent=1)


# --- the rules, for what an offline page cannot show ---------------------------------------------


def _tool(name: str, *, required: dict[str, str] | None = None, **kind: bool) -> dict[str, Any]:
    properties = {arg: {"type": type_} for arg, type_ in (required or {}).items()}
    return {"name": name, "description": f"{name} does it.", "needsApproval": kind.get("approval", False),
            "runsInBrowser": kind.get("browser", False), "longRunning": False,
            "parameters": {"type": "object", "properties": properties, "required": list(properties)}}


DEMO_TOOLS = [_tool("change_bgm", required={"track": "integer"}, approval=True, browser=True),
              _tool("get_location", approval=True, browser=True), _tool("get_weather", required={"location": "string"}),
              _tool("process_payment", required={"amount": "number", "recipient": "string"}, approval=True)]
CASES = {
    "gemini": {"name": "garden", "model": "gemini-2.5-flash",
               "tools": [_tool("water_plants"), _tool("plant_seeds", required={"plant": "string"})]},
    "gemini_demo": {"name": "demo_agent", "model": "gemini-2.5-flash", "tools": DEMO_TOOLS},
    "model_unknown": {"name": "garden", "tools": [_tool("water_plants")]},
    "scripted_variant": {"name": "x", "model": "scripted-fast", "tools": [
        _tool("pay", required={"amount": "number", "to": "string"}), _tool("toggle", required={"on": "boolean"})]},
    "many": {"name": "many", "model": "scripted", "tools": [_tool(f"tool_{i:02}") for i in range(11)]},
    "no_tools": {"name": "bare", "model": "scripted", "tools": []},
    "not_listed": {"name": "old", "tools": None},
    "cannot_say": None,
    "not_known_yet": "unknown",
}


@pytest.fixture(scope="module")
def rules() -> dict[str, Any]:
    cases = {name: {"app": app} for name, app in CASES.items()}
    result, proc = run_node_script(BROWSER_DIR / "suggestions_check.mjs", json.dumps({"cases": cases}), timeout=30)
    assert result["ok"] and proc.returncode == 0, f"{result['failures']}\n{proc.stderr[-3000:]}"
    return dict(result["results"]) | {"max": result["max"]}


def _sent(suggestions: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {s["toolName"]: (s["action"], s["text"]) for s in suggestions["tools"]}


def test_another_model_gets_plain_requests_not_commands(rules: dict[str, Any]) -> None:
    gemini = rules["gemini"]
    assert _sent(gemini) == {"water_plants": ("send", "Use the water_plants tool."),
                             "plant_seeds": ("fill", "Use the plant_seeds tool with plant: ?")}
    # The first argument's "?" is selected: typing replaces it.
    plant = gemini["tools"][1]
    assert plant["text"][slice(*plant["selection"])] == "?"
    assert gemini["commands"] == []
    # The demo agent on another model: its examples in words (which the scripted model also answers).
    assert _sent(rules["gemini_demo"]) == {
        "get_weather": ("send", "What is the weather in Paris?"), "process_payment": ("send", "Pay 5 USD to bob."),
        "change_bgm": ("send", "Play background music track 2."), "get_location": ("send", "Where am I?"),
    }
    # A gateway that does not name the model: plain requests too (a real model may be serving).
    assert _sent(rules["model_unknown"]) == {"water_plants": ("send", "Use the water_plants tool.")}
    assert rules["model_unknown"]["commands"] == []


def test_required_arguments_get_placeholders_by_type(rules: dict[str, Any]) -> None:
    pay, toggle = rules["scripted_variant"]["tools"]  # `scripted-*` is the scripted model too
    assert (pay["action"], pay["text"]) == ("fill", '/tool pay {"amount": 0, "to": ""}')
    assert pay["text"][slice(*pay["selection"])] == "0"  # a number: selected, typing replaces it
    assert (toggle["action"], toggle["text"]) == ("fill", '/tool toggle {"on": false}')
    assert toggle["text"][slice(*toggle["selection"])] == "false"
    assert [c["text"] for c in rules["scripted_variant"]["commands"]] == COMMANDS


def test_many_tools_are_cut_to_a_few(rules: dict[str, Any]) -> None:
    many = rules["many"]
    assert [s["toolName"] for s in many["tools"]] == [f"tool_{i:02}" for i in range(rules["max"])]
    assert many["more"] == [f"tool_{i:02}" for i in range(rules["max"], 11)]
    assert rules["max"] == 8


def test_what_the_page_shows_when_it_knows_no_tools(rules: dict[str, Any]) -> None:
    assert rules["no_tools"]["tools"] == [] and [c["text"] for c in rules["no_tools"]["commands"]] == COMMANDS
    # A gateway that does not list its apps' tools (or cannot say): the demo's commands, as before.
    for name in ("not_listed", "cannot_say"):
        assert {t: text for t, (_action, text) in _sent(rules[name]).items()} == DEMO, name
        assert [c["text"] for c in rules[name]["commands"]] == COMMANDS, name
    assert rules["not_known_yet"] == {"tools": [], "commands": [], "more": []}
