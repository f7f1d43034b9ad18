"""The benchmark runner: every (interpreter, workload, loader, workers) in its own process, repeated.

    ./dev bench                          # the full matrix, both interpreters
    ./dev bench --quick                  # a smaller matrix with fewer records, once
    ./dev bench --workloads cpu,image --loaders plain,pool,aioloader --workers 0,2 --interpreters ft

Each run is `python -m benchmarks.child ...` on the interpreter's cached
environment (free-threaded runs get `PYTHON_GIL=0`), while this process
samples the memory of the child's process tree. Repeats go round the whole
matrix, so that slow drift of the machine spreads over every configuration.
Medians go to `results.json`, `results.md` and one PNG per workload in
`--out` (default benchmarks/results/).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.loaders import LOADERS
from benchmarks.monitor import ForeignLoad, TreeMemory, wait_until_quiet
from benchmarks.workloads import WORKLOADS

REPO = Path(__file__).resolve().parent.parent
DEFAULT_WORKLOADS = (
    "trivial",
    "cpu",
    "tokenize",
    "image",
    "storage",
    "storage-async",
    "arrayrecord",
    "parquet",
    "llm",
    "png",
)
DEFAULT_LOADERS = ("plain", "pool", "aioloader", "aioloader-auto", "grain", "grain-t0", "torch", "spdl")
TIMEOUT = 300.0


@dataclass(frozen=True)
class Interpreter:
    name: str  # "gil" or "ft"
    python: Path
    env: dict[str, str]
    probe: dict[str, Any]


@dataclass(frozen=True)
class Config:
    interpreter: Interpreter
    workload: str
    loader: str
    workers: int
    records: int

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.interpreter.name, self.workload, self.loader, self.workers)

    def label(self) -> str:
        return f"{self.interpreter.name} {self.workload} {self.loader} w={self.workers}"


def csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", type=csv, default=list(DEFAULT_WORKLOADS), help="comma-separated")
    parser.add_argument("--loaders", type=csv, default=list(DEFAULT_LOADERS), help="comma-separated")
    parser.add_argument("--workers", type=lambda t: [int(x) for x in csv(t)], default=[0, 1, 2, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--interpreters", type=csv, default=["gil", "ft"], help="gil, ft")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every record count")
    parser.add_argument("--quick", action="store_true", help="workers 0,2, a fifth of the records, 1 repeat")
    parser.add_argument(
        "--quiet",
        type=float,
        default=0.25,
        help="before each run, wait while other processes keep more than this many cores busy (0: never)",
    )
    parser.add_argument("--patience", type=float, default=120, help="the longest wait for quiet, in seconds")
    parser.add_argument("--list", action="store_true", help="print the configurations and stop")
    parser.add_argument(
        "--check",
        action="store_true",
        help="print issue 15's targets with their figures; exit 1 when one is missed "
        "(by default with the loaders plain,pool,aioloader at workers 0,2)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--python-gil", type=Path, help="default: the cached GIL environment (./dev env gil)")
    parser.add_argument("--python-ft", type=Path, help="default: the cached free-threaded environment")
    args = parser.parse_args(argv)
    if args.check:  # the targets need only these, unless asked for more
        given = " ".join(argv)
        args.loaders = args.loaders if "--loaders" in given else ["plain", "pool", "aioloader"]
        args.workers = args.workers if "--workers" in given else [0, 2]
    if args.quick:
        args.workers, args.scale, args.repeats = [0, 2], args.scale * 0.2, 1
    for name in args.workloads:
        if name not in WORKLOADS:
            parser.error(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    for name in args.loaders:
        if name not in LOADERS:
            parser.error(f"unknown loader {name!r}; choose from {', '.join(LOADERS)}")
    for name in args.interpreters:
        if name not in ("gil", "ft"):
            parser.error(f"unknown interpreter {name!r}; choose gil or ft")
    return args


def find_python(name: str, given: Path | None) -> Path:
    """The interpreter of environment `name`: as `./dev env NAME` prints it, built if needed.

    Asked of `./dev` rather than of `tools.dev` in this process, because the
    environments are keyed on the interpreter that builds them (the
    machine's python3, not this environment's).
    """
    if given is not None:
        return given
    done = subprocess.run([str(REPO / "dev"), "env", name], capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"`./dev env {name}` failed:\n{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1])


def child_env(name: str) -> dict[str, str]:
    # Bytecode is cached (out of the tree), as an installed package's is: without it
    # every `import aioloader` compiles some sixty modules, twice its real cost.
    pycache = REPO / "benchmarks" / "results" / "tmp" / "pycache"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONPYCACHEPREFIX": str(pycache)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if name == "ft":
        env["PYTHON_GIL"] = "0"
    return env


def start_interpreter(name: str, given: Path | None) -> Interpreter:
    python = find_python(name, given)
    env = child_env(name)
    done = subprocess.run(
        [str(python), "-m", "benchmarks.child", "--probe"], env=env, cwd=REPO, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"probing {python} failed:\n{done.stderr}")
    probe = json.loads(done.stdout)
    if name == "ft" and (not probe["free_threaded"] or probe["gil_enabled"]):
        raise SystemExit(f"{python} is not running free-threaded with the GIL off: {probe}")
    return Interpreter(name, python, env, probe)


def matrix(args: argparse.Namespace, interpreters: list[Interpreter]) -> Iterator[Config]:
    for interpreter in interpreters:
        for workload_name in args.workloads:
            workload = WORKLOADS[workload_name]
            if workload.unavailable() is not None:
                continue
            for loader_name in args.loaders:
                loader = LOADERS[loader_name]
                if loader_name not in interpreter.probe["loaders"]:
                    continue
                # The plain loop is the reference for every ratio: it always runs, at 0 workers.
                counts = [0] if loader_name == "plain" else args.workers
                for workers in counts:
                    if loader.runs(workload, workers):
                        records = loader.records(workload, args.scale)
                        yield Config(interpreter, workload_name, loader_name, workers, records)


def run_one(config: Config) -> dict[str, Any]:
    command = [
        str(config.interpreter.python), "-m", "benchmarks.child",
        "--loader", config.loader, "--workload", config.workload,
        "--workers", str(config.workers), "--records", str(config.records),
    ]  # fmt: skip
    load = ForeignLoad()
    process = subprocess.Popen(
        command,
        env=config.interpreter.env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    memory = TreeMemory(process.pid)
    try:
        out, err = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        err += f"\ntimed out after {TIMEOUT:.0f} s"
    peak = memory.stop()
    foreign = load.stop()
    lines = out.strip().splitlines()
    try:
        result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        result = {}
    result["peak_mib"] = peak
    result["processes"] = memory.most_processes
    result["foreign_cores"] = foreign
    result["returncode"] = process.returncode
    if process.returncode != 0:
        result["error"] = err.strip().splitlines()[-12:]
    return result


def run_start(config: Config) -> dict[str, Any]:
    """For aioloader's runs: `import aioloader` to the first batch in a fresh process (first_batch.py)."""
    command = [
        str(config.interpreter.python), "-m", "benchmarks.first_batch", "--workload", config.workload,
        "--workers", str(config.workers), "--records", str(config.records),
    ]  # fmt: skip
    done = subprocess.run(
        command, env=config.interpreter.env, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT
    )
    if done.returncode != 0:
        return {"start_error": done.stderr.strip().splitlines()[-3:]}
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {"start_s": found["start_s"], "cold_import_s": found["import_s"]}


def progress(total: int) -> Any:
    try:
        from tqdm import tqdm  # type: ignore[import-untyped]
    except ImportError:
        return None
    return tqdm(total=total, unit="run", dynamic_ncols=True, file=sys.stderr)


def run_matrix(
    configs: list[Config], repeats: int, quiet: float, patience: float
) -> dict[tuple[str, str, str, int], list[dict[str, Any]]]:
    runs: dict[tuple[str, str, str, int], list[dict[str, Any]]] = {c.key: [] for c in configs}
    bar = progress(len(configs) * repeats)
    done, started = 0, time.monotonic()
    for repeat in range(repeats):
        for config in configs:
            label = f"[{repeat + 1}/{repeats}] {config.label()}"
            if bar is not None:
                bar.set_description(label)
            waited = time.monotonic()
            if quiet > 0:
                wait_until_quiet(quiet, patience)
            waited = time.monotonic() - waited
            result = run_one(config)
            result["waited_s"] = waited
            if config.loader == "aioloader":
                result.update(run_start(config))
            runs[config.key].append(result)
            done += 1
            if bar is not None:
                bar.update()
            else:
                print(
                    f"{done}/{len(configs) * repeats} {label} ({time.monotonic() - started:.0f} s)",
                    file=sys.stderr,
                )
            if result.get("error"):
                message = f"FAILED {config.label()}: " + " | ".join(result["error"][-3:])
                (bar.write if bar is not None else print)(message)
    if bar is not None:
        bar.close()
    return runs


def median(values: Iterable[float]) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def summarise(config: Config, runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [r for r in runs if r.get("returncode") == 0 and r.get("records") == config.records]
    return {
        "interpreter": config.interpreter.name,
        "workload": config.workload,
        "loader": config.loader,
        "workers": config.workers,
        "records": config.records,
        "ok": len(good) == len(runs),
        "complete_runs": len(good),
        "settings": next((r["settings"] for r in runs if "settings" in r), ""),
        "steady_rate": median(r["steady_rate"] for r in good),
        "rate": median(r["rate"] for r in good),
        "rate_min": min((r["steady_rate"] for r in good), default=None),
        "rate_max": max((r["steady_rate"] for r in good), default=None),
        "first_batch_ms": median(r["first_batch_s"] * 1e3 for r in good),
        "start_ms": median(r["start_s"] * 1e3 for r in good if "start_s" in r),
        "cpu_us_per_record": median(r["cpu_s"] / r["records"] * 1e6 for r in good),
        "cores": median(r["cpu_s"] / r["wall_s"] for r in good),
        "peak_mib": median(r["peak_mib"] for r in good),
        "foreign_cores": median(r["foreign_cores"] for r in runs),
        "checksums": sorted({r["checksum"] for r in good}),
        "errors": [r["error"] for r in runs if r.get("error")],
        "runs": [compact(r) for r in runs],
    }


DUPLICATES = ("loader", "workload", "workers", "expected", "settings")


def compact(run: dict[str, Any]) -> dict[str, Any]:
    """One run for results.json: the fields its configuration does not already say, 4 significant digits."""
    return {
        key: float(f"{value:.4g}") if isinstance(value, float) and key != "checksum" else value
        for key, value in run.items()
        if key not in DUPLICATES
    }


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cores": os.cpu_count(), "cpu": cpu, "memory_gib": round(memory, 1), "os": platform.platform()}


def timeline(interpreter: Interpreter, args: argparse.Namespace) -> list[Path]:
    """One run of the `cpu` workload with worker_count="auto", its stages sampled over time
    (benchmarks/timeline.py): the throughput-per-stage plot."""
    records = LOADERS["aioloader"].records(WORKLOADS["cpu"], args.scale)
    command = [str(interpreter.python), "-m", "benchmarks.timeline", "--workload", "cpu", "--workers", "auto",
               "--records", str(records), "--out", str(args.out)]  # fmt: skip
    done = subprocess.run(command, env=interpreter.env, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"timeline failed:\n{done.stderr}", file=sys.stderr)
        return []
    return [args.out / "timeline-cpu.json", args.out / "timeline-cpu.png"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if "ft" in args.interpreters and {"arrayrecord", "llm"} & set(args.workloads):
        # ArrayRecord's official writer installs only on the GIL build: free-threaded runs write there.
        os.environ.setdefault("AIOLOADER_GIL_PYTHON", str(find_python("gil", args.python_gil)))
    interpreters = [
        start_interpreter(name, args.python_gil if name == "gil" else args.python_ft)
        for name in args.interpreters
    ]
    for name in args.workloads:
        why = WORKLOADS[name].unavailable()
        if why is not None:
            print(f"skipping workload {name}: {why}", file=sys.stderr)
    configs = list(matrix(args, interpreters))
    print(f"{len(configs)} configurations x {args.repeats} repeats", file=sys.stderr)
    if args.list:
        for config in configs:
            print(f"{config.label()} records={config.records}")
        return 0
    started = time.time()
    runs = run_matrix(configs, args.repeats, args.quiet, args.patience)
    results = {
        "command": "./dev bench " + " ".join(sys.argv[1:] if argv is None else argv),
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
        "seconds": round(time.time() - started),
        "repeats": args.repeats,
        "machine": machine(),
        "interpreters": {i.name: i.probe for i in interpreters},
        "workloads": {
            name: {
                "title": WORKLOADS[name].title,
                "batch_size": WORKLOADS[name].batch_size,
                "note": WORKLOADS[name].note,
            }
            for name in args.workloads
            if WORKLOADS[name].unavailable() is None
        },
        "loaders": {name: LOADERS[name].title for name in args.loaders},
        "configs": [summarise(c, runs[c.key]) for c in configs],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=None, separators=(",", ":")) + "\n")
    written = report.write(results, args.out)
    written += timeline(interpreters[0], args)
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    failed = [c for c in results["configs"] if not c["ok"]]
    for config in failed:
        where = f"{config['interpreter']} {config['workload']} {config['loader']} w={config['workers']}"
        print(f"incomplete: {where}")
    missed = report.check(results) if args.check else 0
    return 1 if failed or missed else 0


if __name__ == "__main__":
    sys.exit(main())
