"""Developer tooling: interpreters, environments and the `./dev` commands.

Runs on the machine's default CPython (3.11+) with the standard library only,
so that a fresh clone can bootstrap itself.
"""
