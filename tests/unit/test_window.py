"""`Window`: the bound on weight in flight, and its oversize rule."""

from __future__ import annotations

from aioloader._scheduling.window import Window, WindowStatistics


def test_weight_fits_up_to_the_capacity() -> None:
    window = Window(10)
    assert window.fits(6)
    window.take(6)
    assert window.fits(4)
    assert not window.fits(5)
    window.take(4)
    assert not window.fits(1)
    window.release(6)
    assert window.fits(6)
    assert not window.fits(7)


def test_a_request_bigger_than_the_capacity_fits_only_when_nothing_is_in_flight() -> None:
    window = Window(4)
    assert window.fits(9)  # empty: one oversized job must not stall the pipeline
    window.take(9)
    assert not window.fits(1)  # and while it is in flight, nothing else fits
    window.release(9)
    window.take(1)
    assert not window.fits(9)  # not empty: the oversized one waits


def test_statistics_report_use_capacity_and_peak() -> None:
    window = Window(8)
    assert window.statistics() == WindowStatistics(in_use=0, capacity=8, peak=0)
    window.take(3)
    window.take(5)
    window.release(6)
    assert window.statistics() == WindowStatistics(in_use=2, capacity=8, peak=8)
