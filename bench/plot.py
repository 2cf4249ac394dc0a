"""Plot throughput against concurrency from the JSON that bench/escalate.py and
bench/claim.py write (``pip install -e '.[bench]'`` for matplotlib).

    python -m bench.plot /tmp/signoff-bench/escalate.json /tmp/signoff-bench/claim.json \\
        --out docs/benchmarks-throughput.png
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

TITLES = {
    "escalate.json": "POST /tasks/escalate (rows/s for pgbench)",
    "claim.json": "claim-next → resolve cycles/s",
}


def series(path: Path) -> dict[str, list[tuple[int, float]]]:
    """label → [(concurrency, operations per second)], sorted by concurrency."""
    out: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for run in json.loads(path.read_text())["runs"]:
        out[run["label"]].append((run["concurrency"], run["rate_per_s"]))
    return {label: sorted(points) for label, points in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks-throughput.png"))
    args = parser.parse_args()
    figure, axes = plt.subplots(1, len(args.results), figsize=(6 * len(args.results), 4.5))
    for axis, path in zip(list(getattr(axes, "flat", [axes])), args.results, strict=True):
        for label, points in series(path).items():
            style = "--" if label.startswith("pgbench") else "-"
            axis.plot(*zip(*points, strict=True), style, marker="o", label=label)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("concurrent clients")
        axis.set_ylabel("operations per second (log)")
        axis.set_title(TITLES.get(path.name, path.name))
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    figure.suptitle("Signoff over HTTP vs pgbench, same PostgreSQL, 2 shared cores")
    figure.tight_layout()
    figure.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
