"""Gate-order translation the peers' RNN packings share."""
from __future__ import annotations


def gate_runs(order) -> list[tuple[int, int]]:
    """(first oneDNN gate, count) of each run of gates whose blocks follow each other in the
    peer's packing: ``order[j]`` is the peer's block of oneDNN gate ``j``."""
    runs, j0 = [], 0
    for j in range(1, len(order) + 1):
        if j == len(order) or order[j] != order[j - 1] + 1:
            runs.append((j0, j - j0))
            j0 = j
    return runs
