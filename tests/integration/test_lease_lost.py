"""A run the gateway itself stops (its chat's lease taken over by another instance) ends with an
`error` chunk saying why, never an `abort` the user did not ask for."""

from __future__ import annotations

from collections.abc import Callable

from adk_gateway.keys import REGISTRY
from adk_gateway.services.leases import Lease, Leases

from .conftest import StartGateway
from .support import LiveStream, chat_body, user_message

USER = "anonymous"



class LosableLeases(Leases):
    """Leases that another instance can take over (`take_over`), as a shared store's can."""

    def __init__(self) -> None:
        self.lost: dict[tuple[str, str], Callable[[], None]] = {}

    async def acquire(self, key: tuple[str, str], on_lost: Callable[[], None]) -> Lease | None:
        self.lost[key] = on_lost
        return Lease(key)

    def take_over(self, key: tuple[str, str]) -> None:
        self.lost.pop(key)()


async def test_a_run_whose_lease_is_lost_ends_with_an_error_not_an_abort(gateway: StartGateway) -> None:
    """Nobody pressed stop: the client is told why, and the chat's record keeps the same ending."""
    client = await gateway()
    leases = LosableLeases()
    client.app[REGISTRY].leases = leases
    stream = await LiveStream.open(client, chat_body("lost", [user_message("/stream 500 20")]))
    await stream.until(lambda chunk: chunk["type"] == "text-delta")
    leases.take_over((USER, "lost"))
    reply = await stream.rest()
    assert "abort" not in reply.types
    [error] = reply.of_type("error")
    assert "another server took the chat over" in error["errorText"]
    assert reply.done
