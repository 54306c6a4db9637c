"""What many small writes cost a home, and what `registry compact` gives back: a copy of a trained home takes
`--writes` add-models, one transaction each (as a service lands them one at a time), then reads and an
add-model are timed, the store is compacted, and they are timed again. Prints a table.

    .venv/bin/python scripts/bench_compact.py --home locus-demo [--writes 300] [--repeats 5]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def _measure(home: Path, evaluations: list[dict], repeats: int) -> dict[str, float]:
    from indexing.store import EVALUATIONS, MODELS
    from registry import Registry

    reg = Registry.open(home)
    storage = reg.store.storage()
    return {
        "fragments (all tables)": sum(t["fragments"] for t in storage),
        "versions (all tables)": sum(t["versions"] for t in storage),
        "on disk (MB)": sum(t["bytes"] or 0 for t in storage) / 1e6,
        "read the evaluations table (ms)": _median_ms(lambda: reg.store.read(EVALUATIONS), repeats),
        "read the models table (ms)": _median_ms(lambda: reg.store.read(MODELS), repeats),
        "add-model, 80 evaluations (ms)": _median_ms(
            lambda: reg.add_model("bench-probe", evaluations, replace=True), repeats),
        "similar, fresh registry object (ms)": _median_ms(
            lambda: Registry.open(home).similar("bench-probe", k=5), repeats),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True, help="A trained registry (copied; never written).")
    parser.add_argument("--writes", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # thin-evidence warnings of the small probe models
    from registry import Registry

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(shutil.copytree(args.home, Path(tmp) / "home"))
        reg = Registry.open(home)
        ids = [q.id for q in reg.queries().queries]
        evaluations = [{"query_id": q, "score": j % 2} for j, q in enumerate(ids[:80])]
        started = time.perf_counter()
        for i in range(args.writes):
            at = (i * 37) % max(len(ids) - 80, 1)
            reg.add_model(f"bench-{i}", [{"query_id": q, "score": (i + j) % 3 / 2}
                                         for j, q in enumerate(ids[at:at + 80])])
        writing = time.perf_counter() - started
        reg.add_model("bench-probe", evaluations)
        before = _measure(home, evaluations, args.repeats)
        started = time.perf_counter()
        Registry.open(home).compact(keep_versions_for=timedelta(0))
        compacting = time.perf_counter() - started
        after = _measure(home, evaluations, args.repeats)
    print(f"{args.writes} add-models, one transaction each, on a copy of {args.home}: {writing:.1f} s; "
          f"`compact --keep-versions-for 0`: {compacting:.1f} s; medians of {args.repeats}\n")
    print("| | before compact | after | before / after |")
    print("|---|---:|---:|---:|")
    for key in before:
        ratio = before[key] / after[key] if after[key] else float("nan")
        fmt = (lambda v: f"{v:,.0f}") if "(ms)" not in key and "MB" not in key else (lambda v: f"{v:,.1f}")
        print(f"| {key} | {fmt(before[key])} | {fmt(after[key])} | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
