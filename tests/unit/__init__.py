"""Unit tests: one stage at a time, in one thread, deterministic.

Each module tests one private module of the package without a pipeline
around it, so that a change to one stage fails next to its cause. The
contract tests in `tests/` check the whole pipeline.
"""
