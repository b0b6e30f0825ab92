"""matplotlib's pyplot on the file-only Agg backend: every PNG the toolkit writes (benches, the planner,
run reports) is drawn without a display."""
from __future__ import annotations

from typing import Any


def pyplot() -> Any:
    """`matplotlib.pyplot`, with the Agg backend selected (imported on first use: it is slow to load)."""
    from .extras import require

    matplotlib = require("matplotlib", "report", "drawing a plot (report, bench, plan --out)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
