"""What the offline model answers in long_running_app.

"Please reimburse $250 for a team dinner" (a dollar amount and "for <purpose>"): $100 or more calls
ask_for_approval(purpose, amount); less calls reimburse(purpose, amount) straight away.
ask_for_approval's interim {"status": "pending"} gets PENDING. Its final response (sent later by the
client, same call id): {"status": "approved"} (or {"approved": true}) calls reimburse with the request's
purpose and amount, anything else gets REJECTED. reimburse's response gets "Done: $250.00 reimbursed for a team dinner."
"""

import re

from gemini_like import Turn, call, last_function_call, last_function_responses, last_user_text, say
from google.adk.models.llm_request import LlmRequest

PENDING = ("Your request is ", "waiting for approval.")
REJECTED = ("Sorry, your request ", "was rejected.")
HELP = "Tell me the amount and what it was for, e.g. Please reimburse $250 for a team dinner."
APPROVAL_LIMIT = 100

_REQUEST = re.compile(r"\$\s*(\d+(?:\.\d+)?)\s+for\s+(.+?)[.!?]*$", re.IGNORECASE)


def done(purpose: str, amount: float) -> tuple[str, str]:
    return ("Done: ", f"${amount:.2f} reimbursed for {purpose}.")


def script(request: LlmRequest) -> Turn:
    for response in last_function_responses(request):
        result = response.response or {}
        if response.name == "reimburse":
            return say(*done(result.get("purpose", ""), float(result.get("amount", 0))))
        if response.name == "ask_for_approval":
            status = result.get("status")
            if status == "pending":
                return say(*PENDING)
            asked = last_function_call(request, "ask_for_approval")
            args = dict(asked.args or {}) if asked else {}
            if status == "approved" or result.get("approved") is True:
                return call("reimburse", purpose=args.get("purpose", ""), amount=args.get("amount", 0))
            return say(*REJECTED)
    match = _REQUEST.search(last_user_text(request))
    if not match:
        return say(HELP)
    amount, purpose = float(match.group(1)), match.group(2)
    if amount >= APPROVAL_LIMIT:
        return call("ask_for_approval", purpose=purpose, amount=amount)
    return call("reimburse", purpose=purpose, amount=amount)
