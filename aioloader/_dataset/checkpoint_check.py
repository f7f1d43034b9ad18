"""`assert_equal_output_after_checkpoint(ds)`: Grain's test that a pipeline resumes exactly.

It runs `ds` to its end, taking the state before each element, then resumes a fresh
iterator from every one of those states and checks that it reports the same state and
gives exactly the rest of the elements. Quadratic in the length: meant for a small
dataset (a `LimitIterDataset` of the real one), in a user's test.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def assert_equal_output_after_checkpoint(ds: Any) -> None:
    """Raise AssertionError unless every state taken while iterating `ds` resumes exactly."""
    iterator = iter(ds)
    states: list[Any] = []
    elements: list[Any] = []
    while True:
        state = iterator.get_state()
        try:
            element = next(iterator)
        except StopIteration:
            break
        states.append(state)
        elements.append(element)
    assert elements, "the dataset gave no elements: there is nothing to resume"
    for i, state in enumerate(states):
        resumed = iter(ds)
        resumed.set_state(state)
        np.testing.assert_equal(
            resumed.get_state(), state, f"the state resumed at step {i} reads back otherwise"
        )
        np.testing.assert_equal(
            list(resumed), elements[i:], f"the elements after the state of step {i} differ"
        )
