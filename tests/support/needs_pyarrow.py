"""A transform whose module imports an extension that refuses isolated subinterpreters (pyarrow)."""

from __future__ import annotations

from typing import Any

import pyarrow  # noqa: F401 - the point: its `lib` module does not support loading in subinterpreters

from aioloader import MapTransform


class NeedsPyarrow(MapTransform):
    def map(self, element: Any) -> Any:
        return element
