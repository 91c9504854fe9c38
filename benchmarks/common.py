"""Shared benchmark plumbing: timing, memory kept for backward, peak memory, JSON records."""
from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from seastar_layers.profiling import peak_allocated_bytes, saved_for_backward_bytes

# The examples' dataset loaders (local files first, else the loader's download); after this folder
# on the path, so that `common` stays this module.
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "examples"))
from data import DEFAULT_ROOT, DataUnavailable, load_dataset  # noqa: E402

__all__ = ["DEFAULT_ROOT", "RESULTS", "load", "machine", "peak_allocated_bytes", "saved_for_backward_bytes", "table",
           "time_fwd_bwd", "write_record"]

RESULTS = Path(__file__).parent / "results"


def load(name: str, root: str):
    """A dataset by name (see examples/data.py); exits with the loader's explanation when it cannot be had."""
    try:
        return load_dataset(name, root)
    except DataUnavailable as e:
        sys.exit(f"error: {e}")


def time_fwd_bwd(step, warmup: int = 3, repeat: int = 15) -> float:
    """Median seconds of step() (which runs forward and backward)."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def machine() -> dict:
    return {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpu": platform.processor() or
            platform.machine(), "python": platform.python_version()}


def write_record(name: str, record: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(record, indent=2))
    return path


def table(rows: list[dict], columns: list[str]) -> str:
    widths = [max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(str(r.get(c, "")).ljust(w) for c, w in zip(columns, widths)) for r in rows]
    return "\n".join(lines)
