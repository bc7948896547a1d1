"""Events that arrive while a subscription's replay is read wait in its buffer; they are
held in memory as much as queued ones are, so they count toward the socket's and the
workspace's byte bounds (:meth:`api.services.realtime.Hub.charge`). They counted by
number only: 1,000 events of up to 256 KiB each (what is not cut) could pile up per
socket for the replay's length.

In process: a real hub and client over the real settings; only the peer at the other
end of the socket (a browser) is stood in for, by an object that takes a close."""

from __future__ import annotations

import asyncio

import pytest

from api.services.realtime import SLOW_CONSUMER, Change, Client, Hub, Subscription
from api.state import AppState
from service.config import Settings
from storage.access import Principal
from storage.db import Database

WS = 7


class _Peer:
    """The browser end of the socket: it only gets closed here."""

    def __init__(self) -> None:
        self.closed: tuple[int, str] | None = None

    async def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)


def _hub() -> Hub:
    settings = Settings(realtime_socket_max_bytes=2048, realtime_workspace_max_bytes=3072)
    return Hub(AppState(settings=settings, db=Database(settings.database_url)))


def _client(hub: Hub) -> tuple[Client, _Peer]:
    peer = _Peer()
    principal = Principal(token_id=1, workspace_id=WS, type="builder", profile_id=None, plan="enterprise",
                          read_only=False, expires_at=None)
    client = Client(hub, peer, "secret", principal, queue_max=1000)  # type: ignore[arg-type]
    hub.add(client)
    return client, peer


def _change(seq: int, size: int = 900) -> Change:
    return Change(seq=seq, table_id=3, event="INSERT", text="x" * size, size=size, sides=1)


def _replaying() -> Subscription:
    return Subscription(3, frozenset({"INSERT"}), (), buffering=True)


@pytest.mark.asyncio
async def test_events_buffered_during_a_replay_count_toward_the_socket_bound():
    hub = _hub()
    client, peer = _client(hub)
    client.attach(_replaying())
    client.offer(_change(1))
    client.offer(_change(2))
    assert client.queued_bytes == 1800 and hub.queued[WS] == 1800 and not client.closed
    client.offer(_change(3))  # 2,700 bytes held: past the socket's 2,048
    assert client.closed
    await asyncio.sleep(0.05)  # the close is sent by a task
    assert peer.closed is not None and peer.closed[0] == SLOW_CONSUMER
    assert WS not in hub.queued  # what it held is no longer counted


@pytest.mark.asyncio
async def test_buffered_bytes_move_to_the_queue_and_leave_with_an_unsubscribe():
    hub = _hub()
    client, _ = _client(hub)
    sub = _replaying()
    client.attach(sub)
    client.offer(_change(1))
    client.offer(_change(2))
    held = client.release(sub)  # the replay is read: its buffer goes out with it
    assert [c.seq for c in held] == [1, 2] and client.queued_bytes == 0 and not sub.buffering
    client.put(held)
    assert client.queued_bytes == 1800
    # a new replay's buffer, then an unsubscribe: its bytes are no longer counted
    client.attach(_replaying())
    client.offer(_change(3, 100))
    assert client.queued_bytes == 1900
    assert client.detach(3) is not None
    assert client.queued_bytes == 1800 and hub.queued[WS] == 1800
    # subscribing again over a buffering subscription gives its bytes back too
    client.attach(_replaying())
    client.offer(_change(4, 100))
    client.attach(_replaying())
    assert client.queued_bytes == 1800 and not client.closed


@pytest.mark.asyncio
async def test_the_workspace_bound_counts_buffered_events_and_closes_the_socket_holding_most():
    hub = _hub()
    (a, _), (b, _) = _client(hub), _client(hub)
    a.attach(_replaying())
    b.attach(_replaying())
    a.offer(_change(1, 1500))
    b.offer(_change(1, 1000))
    a.offer(_change(2, 200))
    assert not a.closed and not b.closed and hub.queued[WS] == 2700
    b.offer(_change(2, 500))  # 3,200 in the workspace, past 3,072: a holds the most
    assert a.closed and not b.closed and hub.queued[WS] == 1500
