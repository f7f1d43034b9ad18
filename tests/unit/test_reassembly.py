"""`OrderedResults`: results put in any order come out in sequence order."""

from __future__ import annotations

from aioloader._scheduling.reassembly import OrderedResults


def test_results_put_out_of_order_are_taken_in_order() -> None:
    results: OrderedResults[str] = OrderedResults()
    results.put(2, "c", 30)
    results.put(1, "b", 20)
    assert not results.ready()  # 0 is missing: 1 and 2 wait behind it
    results.put(0, "a", 10)
    taken = []
    while results.ready():
        taken.append(results.take())
    assert taken == [("a", 10), ("b", 20), ("c", 30)]
    assert results.next == 3


def test_a_gap_holds_back_everything_after_it() -> None:
    results: OrderedResults[int] = OrderedResults()
    results.put(0, 0, 1)
    results.put(3, 3, 1)
    assert results.take() == (0, 1)
    assert not results.ready()  # 1 and 2 are not here
    results.put(1, 1, 1)
    assert results.take() == (1, 1)
    assert not results.ready()


def test_clear_drops_every_stored_result_but_keeps_the_sequence() -> None:
    results: OrderedResults[int] = OrderedResults()
    results.put(0, 0, 1)
    results.put(1, 1, 1)
    results.take()
    results.clear()
    assert not results.ready()
    assert results.next == 1
