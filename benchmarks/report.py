"""The results as a Markdown report (tables, ratios, targets) and one PNG per workload."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INTERPRETER_TITLES = {"gil": "GIL", "ft": "free-threaded"}
MARKERS = "os^vD<>ph*"
NOISY = 0.25  # cores kept busy by other processes, above which a run is flagged

Summary = dict[str, Any]


class Index:
    """The configurations of one run, looked up by (interpreter, workload, loader, workers)."""

    def __init__(self, results: dict[str, Any]) -> None:
        self.results = results
        self.configs: list[Summary] = results["configs"]
        self._by_key = {(c["interpreter"], c["workload"], c["loader"], c["workers"]): c for c in self.configs}

    def get(self, interpreter: str, workload: str, loader: str, workers: int) -> Summary | None:
        return self._by_key.get((interpreter, workload, loader, workers))

    def rate(self, interpreter: str, workload: str, loader: str, workers: int) -> float | None:
        return _steady(self.get(interpreter, workload, loader, workers))

    def reference(self, c: Summary, against: str = "plain") -> Summary | None:
        """The plain loop's run beside `c`; with `against="pool"`, the ideal thread pool's with as
        many threads as `c` has workers (the plain loop's for none)."""
        if against == "pool" and c["workers"]:
            return self.get(c["interpreter"], c["workload"], "pool", c["workers"])
        return self.get(c["interpreter"], c["workload"], "plain", 0)

    def plain(self, c: Summary) -> float | None:
        return _steady(self.reference(c))

    def pool(self, c: Summary) -> float | None:
        return _steady(self.reference(c, "pool"))

    def vs_plain(self, c: Summary) -> float | None:
        return _ratio(c["steady_rate"], self.plain(c))

    def vs_pool(self, c: Summary) -> float | None:
        return _ratio(c["steady_rate"], self.pool(c))

    def memory_vs_plain(self, c: Summary) -> float | None:
        plain = self.get(c["interpreter"], c["workload"], "plain", 0)
        return None if plain is None else _ratio(c["peak_mib"], plain["peak_mib"])


def _steady(found: Summary | None) -> float | None:
    """A run's rate from its first batch, if it was measured."""
    return None if found is None else found["steady_rate"]


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def rate_text(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def ratio_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


@dataclass
class Target:
    text: str
    measured: str
    met: bool | None  # None: not measured in this run


def _at_least(
    index: Index, interpreter: str, workload: str, workers: int, goal: float, against: str = "plain"
) -> Target:
    """aioloader's throughput over the plain loop's (`against="plain"`) or the ideal pool's (`"pool"`)."""
    reference = "the plain loop" if against == "plain" else "the ideal thread pool"
    title = f"{INTERPRETER_TITLES[interpreter]}, {workload}, {workers} workers: >= {goal}x {reference}"
    c = index.get(interpreter, workload, "aioloader", workers)
    if c is None:
        return Target(title, "not measured", None)
    reference = index.reference(c, against)
    base = _steady(reference)
    ratio = _ratio(c["steady_rate"], base)
    if reference is None or ratio is None:
        return Target(title, "not measured", None)
    measured = f"{ratio:.2f}x ({rate_text(c['steady_rate'])} vs {rate_text(base)} rec/s)"
    whole = _ratio(c.get("rate"), reference.get("rate"))
    if whole is not None:
        # Shown, not judged: the whole run counts what each pays before its first batch (the
        # plain loop's permutation of every key, the loader's start).
        measured += f"; over the whole run, first batch included, {whole:.2f}x"
    return Target(title, measured, ratio >= goal)


def _worst(
    title: str,
    rows: list[Summary],
    value: Callable[[Summary], float | None],
    ok: Callable[[float], bool],
    show: Callable[[float], str],
    lowest: bool,
) -> Target:
    scored: list[tuple[float, Summary]] = []
    for row in rows:
        found = value(row)
        if found is not None:
            scored.append((found, row))
    if not scored:
        return Target(title, "not measured", None)
    failing = [(v, c) for v, c in scored if not ok(v)]
    v, c = (min if lowest else max)(scored, key=lambda pair: pair[0])
    where = f"{c['workload']} w={c['workers']}"
    detail = f"worst {show(v)} ({where})"
    if failing:
        detail += "; misses: " + ", ".join(f"{f['workload']} w={f['workers']} {show(x)}" for x, f in failing)
    return Target(title, detail, not failing)


def _auto_vs_best(index: Index, workload: str) -> Target:
    """Issue 14: `worker_count="auto"` against the best fixed worker count of the same run."""
    title = f'free-threaded, {workload}: worker_count="auto" >= 0.9x the best fixed worker_count'
    auto = index.get("ft", workload, "aioloader-auto", 0)
    fixed = [
        c
        for c in index.configs
        if (c["interpreter"], c["workload"], c["loader"]) == ("ft", workload, "aioloader")
    ]
    if auto is None or not fixed:
        return Target(title, "not measured", None)
    best = max(fixed, key=lambda c: c["steady_rate"])
    ratio = _ratio(auto["steady_rate"], best["steady_rate"]) or 0.0
    measured = (
        f"{ratio:.2f}x ({rate_text(auto['steady_rate'])} vs w={best['workers']} "
        f"{rate_text(best['steady_rate'])} rec/s; peak {number(auto['peak_mib'])} MiB)"
    )
    return Target(title, measured, ratio >= 0.9)


def targets(index: Index) -> list[Target]:
    """The issue's targets for aioloader, each with what this run measured."""
    ft = [c for c in index.configs if c["interpreter"] == "ft" and c["loader"] == "aioloader"]
    at2 = [c for c in ft if c["workers"] == 2]
    threaded = [c for c in ft if c["workers"] > 0]
    return [
        # Issue 15's table, in its order.
        _at_least(index, "ft", "trivial", 0, 0.95),
        _at_least(index, "ft", "trivial", 2, 0.9, against="pool"),
        _at_least(index, "ft", "image", 2, 0.95, against="pool"),
        _worst(
            "free-threaded, every workload: `import aioloader` to the first batch <= 50 ms (fresh process)",
            ft, lambda c: c.get("start_ms"), lambda v: v <= 50, lambda v: f"{v:.0f} ms", lowest=False,
        ),
        _at_least(index, "gil", "trivial", 2, 0.8),
        _at_least(index, "gil", "image", 2, 0.95),
        # Issue 14: "auto" on every workload of the run.
        *[_auto_vs_best(index, w) for w in dict.fromkeys(c["workload"] for c in index.configs)],
        # The earlier targets, met in earlier runs.
        _at_least(index, "ft", "cpu", 2, 1.6),
        _at_least(index, "ft", "image", 2, 1.4),
        _at_least(index, "ft", "storage-async", 2, 10),
        _at_least(index, "ft", "storage", 2, 10),
        _worst(
            "free-threaded, 2 workers: first batch under 50 ms",
            at2, lambda c: c["first_batch_ms"], lambda v: v < 50, lambda v: f"{v:.0f} ms", lowest=False,
        ),
        _worst(
            "free-threaded, 2 workers: peak memory <= 1.5x the plain loop's",
            at2, index.memory_vs_plain, lambda v: v <= 1.5, ratio_text, lowest=False,
        ),
        _worst(
            "free-threaded, every workload, 1-4 workers: >= 0.9x the ideal thread pool",
            threaded, index.vs_pool, lambda v: v >= 0.9, ratio_text, lowest=True,
        ),
    ]  # fmt: skip


def check(results: dict[str, Any]) -> int:
    """Print every target with its figure; 1 when one measured is missed, else 0."""
    found = targets(Index(results))
    for t in found:
        verdict = "not measured" if t.met is None else "met" if t.met else "MISSED"
        print(f"{verdict:>12}  {t.text}: {t.measured}")
    return 1 if any(t.met is False for t in found) else 0


def _interpreters_line(results: dict[str, Any]) -> list[str]:
    lines = []
    for name, probe in results["interpreters"].items():
        versions = ", ".join(f"{k} {v}" for k, v in probe["versions"].items() if v)
        gil = "GIL off (PYTHON_GIL=0)" if not probe["gil_enabled"] else "GIL on"
        build = "free-threaded build" if probe["free_threaded"] else "default build"
        lines.append(
            f"- **{INTERPRETER_TITLES[name]}**: CPython {probe['python']}, {build}, {gil}; {versions}"
        )
    return lines


def markdown(results: dict[str, Any], plots: dict[str, str]) -> str:
    index = Index(results)
    m = results["machine"]
    out = [
        "# Benchmark results",
        "",
        f"`{results['command']}`, started {results['started']}, {results['seconds']} s in all, "
        f"{results['repeats']} repeat(s) of each configuration, each in a fresh process.",
        "",
        f"Machine: {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, {m['os']}.",
        "",
        *_interpreters_line(results),
        "",
        "**rec/s**: median records per second after the first batch. **x plain**: against the plain "
        "Python loop on the same interpreter. **x pool**: against the ideal thread pool with as many "
        "threads as the loader has workers (at 0 workers, the plain loop). **first batch**: from "
        "constructing the loader to the first batch. **import + first**: from `import aioloader` to "
        "the first batch in a fresh process (numpy imported, source and transform built; asyncio "
        "too for an async source, whose module would import it). "
        "**CPU**: CPU time of the whole process tree per "
        "record (1 core busy at 10,000 rec/s = 100 us). **peak**: peak PSS of the process tree, sampled "
        "every 25 ms. Loaders marked ! delivered a wrong record count or failed in some repeat.",
        "",
        "## Targets (aioloader)",
        "",
        "| target | measured | met |",
        "| --- | --- | --- |",
    ]
    for t in targets(index):
        out.append(f"| {t.text} | {t.measured} | {'-' if t.met is None else 'yes' if t.met else '**no**'} |")
    for workload, info in results["workloads"].items():
        out += ["", f"## {workload}: {info['title']} (batch {info['batch_size']})", ""]
        if info.get("note"):
            out += [info["note"] + ".", ""]
        if workload in plots:
            out += [f"![{workload}]({plots[workload]})", ""]
        out += [
            "| interpreter | loader | workers | rec/s | x plain | x pool "
            "| first batch (ms) | import + first (ms) | CPU (us/rec) | peak (MiB) |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        out += [_row(index, c) for c in index.configs if c["workload"] == workload]
    out += ["", "## Loaders and their settings", ""]
    for loader, title in results["loaders"].items():
        settings = sorted(
            {c["settings"] for c in index.configs if c["loader"] == loader and c["workers"] in (0, 2)}
        )
        if settings:
            out.append(f"- **{loader}** ({title}): " + "; ".join(f"`{s}`" for s in settings))
    out += ["", "## Checks", ""]
    out += _checks(index)
    return "\n".join(out) + "\n"


def _row(index: Index, c: Summary) -> str:
    cells = [
        INTERPRETER_TITLES[c["interpreter"]],
        c["loader"] + ("" if c["ok"] else " !"),
        str(c["workers"]),
        rate_text(c["steady_rate"]),
        ratio_text(index.vs_plain(c)),
        ratio_text(index.vs_pool(c)),
        number(c["first_batch_ms"]),
        number(c.get("start_ms")),
        number(c["cpu_us_per_record"], 1),
        number(c["peak_mib"]),
    ]
    return "| " + " | ".join(cells) + " |"


def _checks(index: Index) -> list[str]:
    lines = []
    for c in index.configs:
        if not c["ok"]:
            error = " / ".join(" ".join(e[-2:]) for e in c["errors"][:1])
            lines.append(f"- {c['interpreter']} {c['workload']} {c['loader']} w={c['workers']}: "
                         f"{c['complete_runs']}/{len(c['runs'])} complete runs. {error}")  # fmt: skip
    groups: dict[tuple[str, str, int], set[float]] = {}
    for c in index.configs:
        for value in c["checksums"]:
            groups.setdefault((c["interpreter"], c["workload"], c["records"]), set()).add(round(value, 0))
    for (interpreter, workload, records), sums in sorted(groups.items()):
        if len(sums) > 1:
            lines.append(
                f"- checksums differ for {interpreter} {workload} ({records} records): {sorted(sums)}"
            )
    total = sum(len(c["runs"]) for c in index.configs)
    loads = sorted(r.get("foreign_cores", 0.0) for c in index.configs for r in c["runs"])
    if loads:
        busy = [c for c in index.configs if (c.get("foreign_cores") or 0) > NOISY]
        lines.append(
            f"- Other processes on the machine kept {loads[len(loads) // 2]:.2f} cores busy during the "
            f"median run (at most {loads[-1]:.2f})."
            + (f" Configurations disturbed by more than {NOISY} cores: "
               + ", ".join(f"{c['interpreter']} {c['workload']} {c['loader']} w={c['workers']}" for c in busy)
               if busy else "")
        )  # fmt: skip
    if not [line for line in lines if not line.startswith("- Other processes")]:
        lines.insert(
            0,
            f"- All {total} runs delivered every record, and loaders that read the same records "
            "agree on their checksum.",
        )
    return lines


def plot(results: dict[str, Any], out: Path) -> dict[str, str]:
    """One PNG per workload: throughput against workers, the interpreters side by side."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    index = Index(results)
    interpreters = list(results["interpreters"])
    loaders = [name for name in results["loaders"] if name != "plain"]
    written: dict[str, str] = {}
    for workload, info in results["workloads"].items():
        fig, axes = plt.subplots(
            1, len(interpreters), figsize=(5 * len(interpreters), 3.6), sharey=True, squeeze=False
        )
        for ax, interpreter in zip(axes[0], interpreters, strict=True):
            for k, loader in enumerate(loaders):
                points = [(c["workers"], c["steady_rate"]) for c in index.configs
                          if (c["interpreter"], c["workload"], c["loader"]) == (interpreter, workload, loader)
                          and c["steady_rate"]]  # fmt: skip
                if points:
                    xs, ys = zip(*sorted(points), strict=True)
                    ax.plot(xs, ys, marker=MARKERS[k % len(MARKERS)], color=f"C{k % 10}", label=loader)
            plain = index.rate(interpreter, workload, "plain", 0)
            if plain:
                ax.axhline(plain, color="black", linestyle="--", linewidth=1, label="plain loop")
            ax.set_title(
                f"{INTERPRETER_TITLES[interpreter]} ({results['interpreters'][interpreter]['python']})"
            )
            ax.set_xlabel("workers")
            ax.set_yscale("log")
            ax.set_xticks(sorted({c["workers"] for c in index.configs}))
            ax.grid(True, which="both", alpha=0.3)
        axes[0][0].set_ylabel("records/s")
        handles, labels = axes[0][-1].get_legend_handles_labels()
        for ax in axes[0][:-1]:
            h, lab = ax.get_legend_handles_labels()
            for one, name in zip(h, lab, strict=True):
                if name not in labels:
                    handles.append(one)
                    labels.append(name)
        fig.legend(handles, labels, loc="center right", fontsize=8)
        fig.suptitle(f"{workload}: {info['title']}", fontsize=10)
        fig.tight_layout(rect=(0, 0, 0.85, 1))
        name = f"{workload}.png"
        fig.savefig(out / name, dpi=72)
        plt.close(fig)
        written[workload] = name
    return written


def write(results: dict[str, Any], out: Path) -> list[Path]:
    """Write results.md and the plots into `out`; return the paths written."""
    plots = plot(results, out)
    (out / "results.md").write_text(markdown(results, plots))
    return [out / "results.md", *(out / name for name in plots.values())]


def main() -> int:
    """Redraw the report from an existing results.json: `python -m benchmarks.report [--check] [DIR]`
    (`--check`: print the targets instead, exit 1 when one is missed)."""
    import json
    import sys

    args = sys.argv[1:]
    checking = "--check" in args
    args = [a for a in args if a != "--check"]
    out = Path(args[0]) if args else Path(__file__).parent / "results"
    results = json.loads((out / "results.json").read_text())
    if checking:
        return check(results)
    for path in write(results, out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
