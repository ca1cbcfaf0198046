"""What the offline model answers in sequential_app, whatever the user says: the writer DRAFT, the
reviewer REVIEW (stored in state as "draft" and "review" by the agents' output_key)."""

from gemini_like import Turn, agent_name_of, say
from google.adk.models.llm_request import LlmRequest

DRAFT = ("Roses are red, ", "violets are blue.")
REVIEW = ("The draft rhymes. ", "Approved.")


def script(request: LlmRequest) -> Turn:
    return say(*(REVIEW if agent_name_of(request) == "reviewer" else DRAFT))
