"""Plot the ratio column of docs/benchmarks.md to docs/img/benchmarks.png (needs matplotlib).

    python benchmarks/report.py

Each row of the table with a ratio is a bar; 1.0, the baseline measured in the same run, is a
line. The figures live in the table only: edit it, then run this again.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"
PNG = ROOT / "docs" / "img" / "benchmarks.png"


def ratios(text: str) -> list[tuple[str, float]]:
    """(what, ratio) for each table row whose last cell is a number."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"\d+(\.\d+)?", cells[4]):
            rows.append((cells[0].replace("`", ""), float(cells[4])))
    return rows


def main() -> int:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report.py: matplotlib is not installed: pip install matplotlib", file=sys.stderr)
        return 2
    rows = ratios(PAGE.read_text(encoding="utf-8"))
    labels = [what if len(what) <= 60 else what[:57] + "..." for what, _ in rows]
    fig, ax = plt.subplots(figsize=(10, 0.4 * len(rows) + 1.2), dpi=100)
    ax.barh(range(len(rows)), [r for _, r in rows], color="#3f51b5")
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("rrcli ÷ its baseline in the same run (log scale; 1 = the baseline)")
    fig.tight_layout()
    PNG.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PNG, metadata={"Software": None})
    print(f"wrote {PNG.relative_to(ROOT)} ({len(rows)} ratios)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
