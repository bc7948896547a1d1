"""KeyedSlots: at most ``size`` holders per key, waiters served first come first served,
a wait bounded by its timeout, a cancelled wait never loses a slot (pure asyncio)."""

from __future__ import annotations

import asyncio

import pytest

from storage.slots import KeyedSlots


def run(coro):
    return asyncio.run(coro)


def test_free_slots_are_taken_at_once_and_counted_per_key():
    async def go():
        slots = KeyedSlots(2)
        a = await slots.take("w1", 1.0)
        b = await slots.take("w1", 1.0)
        c = await slots.take("w2", 1.0)
        assert (slots.held("w1"), slots.held("w2"), slots.held("w3")) == (2, 1, 0)
        a()
        b()
        c()
        assert (slots.held("w1"), slots.held("w2")) == (0, 0)

    run(go())


def test_waiters_are_served_in_arrival_order():
    async def go():
        slots = KeyedSlots(1)
        release = await slots.take("w", 1.0)
        order: list[int] = []

        async def waiter(i: int) -> None:
            give_back = await slots.take("w", 5.0)
            order.append(i)
            await asyncio.sleep(0)
            give_back()

        tasks = [asyncio.create_task(waiter(i)) for i in range(5)]
        await asyncio.sleep(0.01)
        assert order == [] and slots.held("w") == 1
        release()
        await asyncio.gather(*tasks)
        assert order == [0, 1, 2, 3, 4] and slots.held("w") == 0

    run(go())


def test_a_newcomer_does_not_overtake_a_waiter():
    async def go():
        slots = KeyedSlots(1)
        release = await slots.take("w", 1.0)
        first = asyncio.create_task(slots.take("w", 5.0))
        await asyncio.sleep(0)
        release()  # the slot passes to the waiter, not to whoever asks next
        second = asyncio.create_task(slots.take("w", 0.05))
        with pytest.raises(TimeoutError):
            await second
        (await first)()
        assert slots.held("w") == 0

    run(go())


def test_a_wait_times_out_and_leaves_the_queue():
    async def go():
        slots = KeyedSlots(1)
        release = await slots.take("w", 1.0)
        with pytest.raises(TimeoutError):
            await slots.take("w", 0.02)
        with pytest.raises(TimeoutError):
            await slots.take("w", 0)  # no wait at all when full
        release()
        assert slots.held("w") == 0
        (await slots.take("w", 0))()  # free again: taken at once

    run(go())


def test_a_cancelled_wait_gives_up_its_place_and_never_a_slot():
    async def go():
        slots = KeyedSlots(1)
        release = await slots.take("w", 1.0)
        waiting = asyncio.create_task(slots.take("w", 5.0))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release()
        assert slots.held("w") == 0

        # cancelled after the slot was handed over but before it ran: the slot is passed on
        release = await slots.take("w", 1.0)
        handed = asyncio.create_task(slots.take("w", 5.0))
        after = asyncio.create_task(slots.take("w", 5.0))
        await asyncio.sleep(0)
        release()
        handed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await handed
        (await after)()
        assert slots.held("w") == 0

    run(go())
