"""What the offline model answers in grounding_app: every question gets the same grounded answer."""

from gemini_like import Turn, last_user_text, say
from google.adk.models.llm_request import LlmRequest
from google.genai import types

ANSWER = ("Paris is ", "the capital ", "of France.")
TEXT = "".join(ANSWER)
SEARCH_SUGGESTIONS_HTML = (
    '<style>.container{display:flex}</style><div class="container"><a class="chip" '
    'href="https://www.google.com/search?q=capital+of+France">capital of France</a></div>'
)


def grounding(query: str) -> types.GroundingMetadata:
    """What Gemini returns with a Google Search (two web pages) plus one document from a RAG corpus."""
    return types.GroundingMetadata(
        grounding_chunks=[
            types.GroundingChunk(
                web=types.GroundingChunkWeb(uri="https://en.wikipedia.org/wiki/Paris", title="wikipedia.org")
            ),
            types.GroundingChunk(
                web=types.GroundingChunkWeb(uri="https://www.britannica.com/place/Paris", title="britannica.com")
            ),
            types.GroundingChunk(
                retrieved_context=types.GroundingChunkRetrievedContext(
                    uri="gs://adk-test-corpus/france.pdf", title="france.pdf", text="Paris is the capital of France."
                )
            ),
        ],
        grounding_supports=[
            types.GroundingSupport(
                segment=types.Segment(start_index=0, end_index=len(TEXT) - 1, text=TEXT[:-1]),
                grounding_chunk_indices=[0, 1, 2],
                confidence_scores=[0.95, 0.9, 0.8],
            )
        ],
        search_entry_point=types.SearchEntryPoint(rendered_content=SEARCH_SUGGESTIONS_HTML),
        web_search_queries=[query],
    )


def script(request: LlmRequest) -> Turn:
    return say(*ANSWER, grounding=grounding(last_user_text(request) or "capital of France"))
