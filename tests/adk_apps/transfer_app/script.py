"""What the offline model answers in transfer_app (one script for the three agents, by agent name).

Any agent: a text mentioning "weather" goes to `weather`, a greeting ("hello", "hi", "hey", "good
morning") to `greeter`, by `transfer_to_agent` (text HANDOFF first), unless the agent is already that one.
weather: calls get_weather(city) (the word after "in", else "London"), then says
"It is sunny and 22°C in Paris." greeter: GREETING. coordinator, anything else: HELP.
"""

import re

from gemini_like import Turn, agent_name_of, call, last_function_responses, last_user_text, say
from google.adk.models.llm_request import LlmRequest

GREETING = ("Hello! ", "Nice to meet you.")
HELP = "I can greet you or tell you the weather."
HANDOFF = "Let me transfer you. "

_GREETING = re.compile(r"\b(hello|hi|hey|good morning)\b", re.IGNORECASE)
_CITY = re.compile(r"\bin\s+([A-Z][\w-]*(?:\s+[A-Z][\w-]*)*)")


def route(text: str) -> str:
    if "weather" in text.lower():
        return "weather"
    if _GREETING.search(text):
        return "greeter"
    return ""


def script(request: LlmRequest) -> Turn:
    agent = agent_name_of(request)
    responses = last_function_responses(request)
    if agent == "weather" and responses and responses[-1].name == "get_weather":
        report = responses[-1].response or {}
        return say("It is ", f"{report.get('forecast')} and {report.get('temperature_c')}°C in {report.get('city')}.")
    text = last_user_text(request)
    target = route(text)
    if target and target != agent:
        return call("transfer_to_agent", HANDOFF, agent_name=target)
    if agent == "weather":
        match = _CITY.search(text)
        return call("get_weather", city=match.group(1) if match else "London")
    if agent == "greeter":
        return say(*GREETING)
    return say(HELP)
