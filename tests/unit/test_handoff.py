"""`Handoff`: in order, bounded, and closed from either side (one thread, no waiting)."""

from __future__ import annotations

import pytest

from aioloader._device.handoff import Handoff, HandoffStatistics


def test_items_come_out_in_order_and_statistics_count_them() -> None:
    handoff: Handoff[int] = Handoff(3)
    for item in (1, 2, 3):
        assert handoff.put(item)
    assert handoff.statistics() == HandoffStatistics(waiting=3, capacity=3, peak=3)
    assert [handoff.get(), handoff.get()] == [1, 2]
    assert handoff.put(4)
    assert handoff.statistics() == HandoffStatistics(waiting=2, capacity=3, peak=3)
    assert [handoff.get(), handoff.get()] == [3, 4]


def test_closed_it_refuses_items_and_ends_after_the_waiting_ones() -> None:
    handoff: Handoff[str] = Handoff(2)
    handoff.put("a")
    handoff.close()
    assert not handoff.put("b")
    assert handoff.get() == "a"
    assert handoff.get() is None


def test_closed_with_drop_it_ends_at_once() -> None:
    handoff: Handoff[str] = Handoff(2)
    handoff.put("a")
    handoff.close(drop=True)
    assert handoff.get() is None
    assert handoff.statistics().waiting == 0


@pytest.mark.asyncio
async def test_aget_takes_what_is_waiting_without_blocking_the_loop() -> None:
    handoff: Handoff[int] = Handoff(1)
    handoff.put(7)
    assert await handoff.aget() == 7
    handoff.close()
    assert await handoff.aget() is None
