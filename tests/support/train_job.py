"""The training job of tests/test_kill_resume.py and tests/test_train_examples.py: examples/train.py
(or examples/train_async.py with `--async`), logging every step.

    python tests/support/train_job.py LOG [--async] [--pause-at STEP] [examples/train.py flags...]

Appends one JSON line per step to LOG: the step, a SHA-256 of the batch's
bytes and the loss (exact, as a hex float). With `--pause-at STEP` it writes
`{"paused": STEP}` after that step and waits, still mid-run (loader threads
prefetching, checkpoints possibly in flight), for the test to kill it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

# The examples import each other as scripts do (train_async: `from train import ...`).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "examples"))
import train


def fingerprint(batch: Any) -> str:
    digest = hashlib.sha256()
    for name in sorted(batch):
        digest.update(np.asarray(batch[name]).tobytes())
    return digest.hexdigest()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("log", type=Path)
    parser.add_argument("--pause-at", type=int)
    parser.add_argument("--async", dest="use_async", action="store_true", help="run train_async.py")
    args, train_flags = parser.parse_known_args(argv)
    with args.log.open("a") as log:

        def on_step(step: int, batch: Any, loss: Any) -> None:
            line = {"step": step, "batch": fingerprint(batch), "loss": float(loss).hex()}
            log.write(json.dumps(line) + "\n")
            log.flush()
            if step == args.pause_at:
                log.write(json.dumps({"paused": step}) + "\n")
                log.flush()
                threading.Event().wait()  # until SIGKILL

        if args.use_async:
            import train_async

            asyncio.run(train_async.main(train.parse(train_flags), on_step))
        else:
            train.train(train.parse(train_flags), on_step)


if __name__ == "__main__":
    main(sys.argv[1:])
