"""What the offline model answers in sign_in_app.

A text mentioning "calendar", "events", "meeting" or "schedule" calls list_calendar_events(day="today",
or "tomorrow" when the text says so). Its response: the events, "You have 2 events today: Standup at
09:00, Design review at 14:00."; still pending (the sign-in failed: the model is only called with it then)
SIGN_IN_FAILED; an error CALENDAR_ERROR. Anything else: HELP.
"""

import re

from gemini_like import Turn, call, last_function_responses, last_user_text, say
from google.adk.models.llm_request import LlmRequest

HELP = "Ask me about your calendar, e.g. What is on my calendar today?"
SIGN_IN_FAILED = "I could not sign in to your calendar. Please try again."
CALENDAR_ERROR = "Your calendar is not available right now."

_ASKS = re.compile(r"\b(calendar|events?|meetings?|schedule)\b", re.IGNORECASE)


def describe(day: str, events: list[dict]) -> tuple[str, ...]:
    if not events:
        return (f"You have no events {day}.",)
    listed = ", ".join(f"{e['summary']} at {e['start']}" for e in events)
    return (f"You have {len(events)} event{'s' if len(events) > 1 else ''} {day}: ", f"{listed}.")


def script(request: LlmRequest) -> Turn:
    for response in last_function_responses(request):
        if response.name == "list_calendar_events":
            result = response.response or {}
            if result.get("status") == "success":
                return say(*describe(result.get("day", "today"), result.get("events", [])))
            if result.get("status") == "pending":
                return say(SIGN_IN_FAILED)
            return say(CALENDAR_ERROR)
    text = last_user_text(request)
    if not _ASKS.search(text):
        return say(HELP)
    return call("list_calendar_events", day="tomorrow" if "tomorrow" in text.lower() else "today")
