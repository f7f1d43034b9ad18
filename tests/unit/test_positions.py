"""The position helpers: what a checkpoint records after each output."""

from __future__ import annotations

import pytest

from aioloader._common.positions import EvenPositions, positions_after_elements, positions_before_elements


def test_even_positions_count_records_retired_and_cap_the_last() -> None:
    positions = EvenPositions(10, 4, 3, 21)  # three batches of 4 from 10; the sampler ends at 21
    assert list(positions) == [(14, 0, 0), (18, 0, 0), (21, 0, 0)]
    assert positions[-1] == (21, 0, 0)
    assert positions[1:] == [(18, 0, 0), (21, 0, 0)]
    assert len(positions) == 3
    with pytest.raises(IndexError):
        positions[3]
    with pytest.raises(IndexError):
        positions[-4]


def test_positions_before_elements_number_the_elements_of_each_record() -> None:
    assert positions_before_elements(5, [0, 0, 2, 3, 3, 3]) == [
        (5, 0, 0),
        (5, 1, 0),
        (7, 0, 0),
        (8, 0, 0),
        (8, 1, 0),
        (8, 2, 0),
    ]


def test_positions_before_elements_start_after_the_skipped_ones() -> None:
    # Resumed at (5, 2, 0): the first record's first two elements were dropped.
    assert positions_before_elements(5, [0, 0, 1], first_skip=2) == [(5, 2, 0), (5, 3, 0), (6, 0, 0)]


def test_positions_after_elements_move_to_the_next_record_after_its_last_element() -> None:
    assert positions_after_elements(5, [0, 0, 2, 3]) == [(5, 1, 0), (6, 0, 0), (8, 0, 0), (9, 0, 0)]
    assert positions_after_elements(5, [0, 1], first_skip=3) == [(6, 0, 0), (7, 0, 0)]
    assert positions_after_elements(5, []) == []
