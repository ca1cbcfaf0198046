"""Session state: a shopping cart kept in `tool_context.state`, and the agent's answer in state by output_key."""

from gemini_like import GeminiLike
from google.adk.agents import Agent
from google.adk.tools.tool_context import ToolContext

from .script import script


def add_to_cart(item: str, quantity: int, tool_context: ToolContext) -> dict:
    """Adds a quantity of an item to the user's shopping cart."""
    cart = [dict(line) for line in tool_context.state.get("cart", [])]
    for line in cart:
        if line["item"] == item:
            line["quantity"] += quantity
            break
    else:
        cart.append({"item": item, "quantity": quantity})
    tool_context.state["cart"] = cart
    tool_context.state["temp:last_added"] = item
    return {"status": "success", "cart": cart}


root_agent = Agent(
    name="shopping_agent",
    model=GeminiLike(script=script),
    description="Keeps the user's shopping cart.",
    instruction="""You keep the user's shopping cart. Use add_to_cart to add items.

    The cart now: {cart?}
    """,
    tools=[add_to_cart],
    output_key="summary",
)
