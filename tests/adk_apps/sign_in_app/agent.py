"""End-user OAuth2 sign-in for a tool (as ADK's oauth_calendar_agent sample), against a local OAuth server.

The server's base URL is the env var ADK_TEST_OAUTH_URL (default http://127.0.0.1:8095; tests/oauth_server.py
is such a server), read on every call. The tool asks ADK for the user's credential with
`tool_context.request_credential`; once the user signed in, ADK exchanges the code at the server's /token
and `tool_context.get_auth_response` gives the token, which the tool uses on the server's /calendar and
keeps in the session state for the next turns (as the sample does).
"""

import json
import os
import urllib.error
import urllib.parse
import urllib.request

from fastapi.openapi.models import OAuth2, OAuthFlowAuthorizationCode, OAuthFlows
from gemini_like import GeminiLike
from google.adk.agents import Agent
from google.adk.auth import AuthConfig, AuthCredential, AuthCredentialTypes, OAuth2Auth
from google.adk.tools import ToolContext

from .script import script

DEFAULT_OAUTH_URL = "http://127.0.0.1:8095"
oauth_client_id = os.getenv("ADK_TEST_OAUTH_CLIENT_ID", "adk-test-client")
oauth_client_secret = os.getenv("ADK_TEST_OAUTH_CLIENT_SECRET", "adk-test-secret")
SCOPES = {"calendar.read": "See your calendar events"}
TOKEN_KEY = "calendar_tool_token"


def oauth_url() -> str:
    return os.getenv("ADK_TEST_OAUTH_URL", DEFAULT_OAUTH_URL).rstrip("/")


def calendar_auth_config() -> AuthConfig:
    base = oauth_url()
    auth_scheme = OAuth2(
        flows=OAuthFlows(
            authorizationCode=OAuthFlowAuthorizationCode(
                authorizationUrl=f"{base}/authorize", tokenUrl=f"{base}/token", scopes=SCOPES
            )
        )
    )
    auth_credential = AuthCredential(
        auth_type=AuthCredentialTypes.OAUTH2,
        oauth2=OAuth2Auth(client_id=oauth_client_id, client_secret=oauth_client_secret),
    )
    return AuthConfig(auth_scheme=auth_scheme, raw_auth_credential=auth_credential)


def fetch_events(token: str, day: str) -> list[dict] | None:
    """The day's events from the server's protected /calendar; None if the token is refused."""
    url = f"{oauth_url()}/calendar?{urllib.parse.urlencode({'day': day})}"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.load(response)["items"]
    except urllib.error.HTTPError as error:
        error.close()
        if error.code == 401:
            return None
        raise


def list_calendar_events(day: str, tool_context: ToolContext) -> dict:
    """Lists the user's calendar events for a day.

    Args:
        day: "today" or "tomorrow".

    Returns:
        The day and its events (summary and start time).
    """
    # A token from an earlier sign-in in this session (the sample keeps its tokens in the state too).
    token = tool_context.state.get(TOKEN_KEY)
    events = fetch_events(token, day) if token else None
    if events is None:
        auth_config = calendar_auth_config()
        # Has the user just signed in? Then ADK has exchanged the code for a token already.
        auth_response = tool_context.get_auth_response(auth_config)
        token = auth_response.oauth2.access_token if auth_response and auth_response.oauth2 else None
        if not token:
            # Ask the user to sign in; ADK sends the client an `adk_request_credential` call.
            tool_context.request_credential(auth_config)
            return {"status": "pending", "message": "Need user authorization to access their calendar."}
        events = fetch_events(token, day)
        if events is None:
            return {"status": "error", "message": "The calendar refused the new token."}
        tool_context.state[TOKEN_KEY] = token
    return {"status": "success", "day": day, "events": events}


root_agent = Agent(
    name="calendar_agent",
    model=GeminiLike(script=script),
    description="Answers questions about the user's calendar.",
    instruction="""
      You are a helpful personal calendar assistant.
      Use list_calendar_events to find the user's events for a day.
    """,
    tools=[list_calendar_events],
)
