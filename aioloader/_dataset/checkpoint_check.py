"""`assert_equal_output_after_checkpoint(ds)`: Grain's test that a pipeline resumes exactly.

It runs `ds` to its end, taking the state before each element, then resumes a fresh
iterator from every one of those states and checks that it reports the same state and
gives exactly the rest of the elements. Quadratic in the length: meant for a small
dataset (a `LimitIterDataset` of the real one), in a user's test.

"Exactly" is a little stricter than Grain's `np.testing.assert_equal`, which takes 1 for
1.0 and an int64 array for a float64 one: a resumed element must also have the types,
dtypes and shapes of the element it stands for (a state whose numbers come back from
JSON as floats can turn a batch's dtype, and the model sees other inputs after resuming).
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
        rest = list(resumed)
        np.testing.assert_equal(rest, elements[i:], f"the elements after the state of step {i} differ")
        for j, (got, expected) in enumerate(zip(rest, elements[i:], strict=True)):
            difference = _kind_difference(got, expected)
            assert difference is None, f"element {i + j}, resumed at step {i}, differs: {difference}"


def _kind_difference(got: Any, expected: Any) -> str | None:
    """Where `got` (equal to `expected` by value) differs in type, dtype or shape, or None."""
    if type(got) is not type(expected):
        return f"{type(got).__name__} instead of {type(expected).__name__}"
    if isinstance(got, np.ndarray | np.generic) and _layout(got) != _layout(expected):
        return f"{got.dtype}{list(got.shape)} instead of {expected.dtype}{list(expected.shape)}"
    if isinstance(got, dict):
        pairs = [(got[key], expected[key]) for key in expected]  # the same keys: assert_equal checked
    elif isinstance(got, list | tuple):
        pairs = list(zip(got, expected, strict=True))
    else:
        return None
    return next((d for a, b in pairs if (d := _kind_difference(a, b)) is not None), None)


def _layout(array: np.ndarray | np.generic) -> tuple[np.dtype[Any], tuple[int, ...]]:
    return array.dtype, array.shape
