"""What the offline model answers in artifacts_app.

"... report ..." calls save_report(title="Q3 sales"); "... chart ..." calls make_chart(); both words: both
calls in one response. Then, for each saved file: "Saved report.txt (version 0)." Anything else gets HELP.
"""

from gemini_like import Turn, last_function_responses, last_user_text, say
from google.adk.models.llm_request import LlmRequest

REPORT_TITLE = "Q3 sales"
HELP = "I can write a report or draw a chart."


def script(request: LlmRequest) -> Turn:
    responses = last_function_responses(request)
    if responses:
        lines = [
            f"Saved {(r.response or {}).get('filename')} (version {(r.response or {}).get('version')})."
            for r in responses
        ]
        return say(*(line + " " for line in lines[:-1]), lines[-1])
    text = last_user_text(request).lower()
    calls: list[tuple[str, dict]] = []
    if "report" in text:
        calls.append(("save_report", {"title": REPORT_TITLE}))
    if "chart" in text:
        calls.append(("make_chart", {}))
    if not calls:
        return say(HELP)
    return Turn(text_chunks=["On it. "], function_calls=calls)
