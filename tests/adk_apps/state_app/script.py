"""What the offline model answers in state_app.

"add 2 apples" (add <number> <item>) calls add_to_cart(item="apples", quantity=2), then answers
"Added 2 apples. Cart: 2 apples." (the whole cart: "Cart: 2 apples, 3 pears."). Anything else: HELP.
"""

import re

from gemini_like import Turn, call, last_function_call, last_function_responses, last_user_text, say
from google.adk.models.llm_request import LlmRequest

HELP = "Tell me what to add, e.g. add 2 apples."

_ADD = re.compile(r"\badd\s+(\d+)\s+([a-z][\w-]*)", re.IGNORECASE)


def script(request: LlmRequest) -> Turn:
    responses = [r for r in last_function_responses(request) if r.name == "add_to_cart"]
    if responses:
        cart = (responses[-1].response or {}).get("cart", [])
        asked = last_function_call(request, "add_to_cart")
        args = dict(asked.args or {}) if asked else {}
        lines = ", ".join(f"{line['quantity']} {line['item']}" for line in cart)
        return say(f"Added {args.get('quantity')} {args.get('item')}. ", f"Cart: {lines}.")
    match = _ADD.search(last_user_text(request))
    if not match:
        return say(HELP)
    return call("add_to_cart", item=match.group(2).lower(), quantity=int(match.group(1)))
