"""Every run ends with one structured log line: user, chat, app, outcome and duration (never the prompt)."""

from __future__ import annotations

from structlog.testing import capture_logs

from adk_gateway.keys import HOST

from .conftest import StartGateway
from .support import LiveStream, chat_body, new_id, post_chat, user_message, wait_for


async def test_each_run_logs_its_end_once(gateway: StartGateway) -> None:
    client = await gateway()
    answered, dropped = new_id("answered"), new_id("dropped")
    with capture_logs() as logs:
        reply = await post_chat(client, chat_body(answered, [user_message("/echo a secret prompt")]),
                                headers={"x-user-id": "carol"})
        assert reply.status == 200
        stream = await LiveStream.open(client, chat_body(dropped, [user_message("/stream 200 20")]))
        await stream.take(3)
        stream.close()  # the client goes away: the run is stopped
        await wait_for(lambda: sum(e["event"] == "run_finished" for e in logs) == 2, what="both runs to end")
    ends = {e["chat_id"]: e for e in logs if e["event"] == "run_finished"}
    assert ends[answered]["user_id"] == "carol" and ends[answered]["outcome"] == "ok"
    assert ends[dropped]["user_id"] == "anonymous" and ends[dropped]["outcome"] == "stopped"
    assert all(e["duration_ms"] >= 0 for e in ends.values())
    assert {e["app"] for e in ends.values()} == {client.app[HOST].app_name}
    assert not any("secret prompt" in str(e) for e in logs)

