"""The autotuner: search a kernel family's parameter space on the device, remember the best.

``PYDNNL_TUNING`` chooses what happens when a primitive needs parameters:

========== ======================================================================
none       heuristic defaults, the database is not read
db         (default) the stored result if any, else the heuristic default
fast       the stored result, else a budgeted random search whose winner is stored
exhaustive the stored result, else every point of the space; the winner is stored
========== ======================================================================

Kernels are timed with OpenCL profiling events: the median of repeats after warm-up.
"""
from __future__ import annotations

import os
import random
from typing import Callable, Iterable

import numpy as np

from ..error import invalid_arguments
from .perfdb import PerfDB

MODES = ("none", "db", "fast", "exhaustive")


def tuning_mode() -> str:
    m = os.environ.get("PYDNNL_TUNING", "db").strip().lower() or "db"
    if m not in MODES:
        raise invalid_arguments(f"PYDNNL_TUNING: expected one of {', '.join(MODES)}, got {m!r}")
    return m


def key_str(key) -> str:
    """A stable text form of a problem key (dataclass reprs are stable)."""
    return repr(key)


def time_launch(engine, launch: Callable, warmup: int = 2, reps: int = 7) -> float:
    """Median device time in ms of ``launch(stream)`` (which returns an event or events)."""
    from ..stream import stream as _stream

    s = _stream(engine, _stream.flags.in_order | _stream.flags.profiling)
    for _ in range(warmup):
        launch(s)
    s.wait()
    times = []
    for _ in range(reps):
        evts = launch(s)
        s.wait()
        if not isinstance(evts, (list, tuple)):
            evts = [evts]
        times.append(sum((e.profile.end - e.profile.start) for e in evts) * 1e-6)
    return float(np.median(times))


def search(engine, candidates: list[dict], make_launch: Callable[[dict], Callable],
           strategy: str = "exhaustive", budget: int | None = None, start: dict | None = None,
           progress: bool = True, seed: int = 0) -> tuple[dict, float, list[tuple[dict, float]]]:
    """Time candidates; returns (best params, best ms, all (params, ms) tried).

    ``exhaustive`` tries every candidate, ``random`` a budgeted random subset (plus
    ``start``), ``greedy`` walks one parameter at a time from ``start`` while it improves.
    Candidates that fail to build or run are skipped.
    """
    if not candidates:
        raise invalid_arguments("tuning: empty search space")
    tried: dict[str, tuple[dict, float]] = {}

    def measure(p: dict) -> float:
        k = repr(sorted(p.items()))
        if k in tried:
            return tried[k][1]
        try:
            ms = time_launch(engine, make_launch(p))
        except Exception:  # an invalid point: skip it
            ms = float("inf")
        tried[k] = (p, ms)
        return ms

    bar = _progress(progress, strategy, budget or len(candidates))
    try:
        if strategy == "exhaustive":
            for p in candidates[: budget or None]:
                measure(p)
                bar.update(1)
        elif strategy == "random":
            rng = random.Random(seed)
            pool = list(candidates)
            rng.shuffle(pool)
            if start is not None:
                pool.insert(0, start)
            for p in pool[: budget or 16]:
                measure(p)
                bar.update(1)
        elif strategy == "greedy":
            cur = dict(start or candidates[0])
            best = measure(cur)
            bar.update(1)
            valid = {repr(sorted(c.items())) for c in candidates}
            keys = sorted({k for c in candidates for k in c})
            values = {k: sorted({c[k] for c in candidates if k in c}, key=repr) for k in keys}
            improved = True
            while improved and (budget is None or len(tried) < budget):
                improved = False
                for k in keys:
                    for v in values[k]:
                        cand = dict(cur, **{k: v})
                        if repr(sorted(cand.items())) not in valid:
                            continue
                        ms = measure(cand)
                        bar.update(1)
                        if ms < best:
                            best, cur, improved = ms, cand, True
                        if budget is not None and len(tried) >= budget:
                            break
        else:
            raise invalid_arguments(f"tuning: unknown strategy {strategy!r}")
    finally:
        bar.close()
    results = sorted(tried.values(), key=lambda r: r[1])
    best_p, best_ms = results[0]
    if best_ms == float("inf"):
        raise invalid_arguments("tuning: no candidate could be built and run")
    return best_p, best_ms, results


def choose(engine, family: str, key, default: dict, candidates: Callable[[], Iterable[dict]],
           make_launch: Callable[[dict], Callable], db: PerfDB | None = None) -> dict:
    """Parameters for one kernel: the database, the default, or a search (by PYDNNL_TUNING)."""
    mode = tuning_mode()
    if mode == "none":
        return dict(default)
    db = db or PerfDB.default()
    dev = engine.info.signature
    k = key_str(key)
    hit = db.get(dev, family, k)
    if hit is not None:
        return hit[0]
    if mode == "db":
        return dict(default)
    cands = list(candidates())
    if mode == "fast":
        best, ms, _ = search(engine, cands, make_launch, "random", budget=12, start=default,
                             progress=_show_progress())
    else:
        best, ms, _ = search(engine, cands, make_launch, "exhaustive", progress=_show_progress())
    db.put(dev, family, k, best, ms)
    return best


def _show_progress() -> bool:
    return os.environ.get("PYDNNL_TUNING_PROGRESS", "1") != "0"


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(enabled: bool, strategy: str, total: int):
    if not enabled:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc=f"pydnnl tuning ({strategy})", leave=False)
