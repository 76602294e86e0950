"""Variable sequence lengths: the sorted, packed row layout the RNN plans use.

Sequences are sorted by decreasing length (stable), so that at step t the valid ones are the
first ``batch[t]`` rows. Per-step state regions keep N rows per step (rows >= batch[t] are
padding, never read for a valid result); the layer GEMMs read and write packed rows:
step t's valid rows start at ``off[t]`` and there are ``S = sum(batch)`` of them.
"""
from __future__ import annotations

import numpy as np


class SeqLayout:
    def __init__(self, lengths, T: int):
        self.lengths = np.asarray(lengths, np.int64)
        self.T, self.N = T, len(self.lengths)
        self.perm = np.argsort(-self.lengths, kind="stable")  # sorted row -> sequence
        self.pos = np.empty_like(self.perm)
        self.pos[self.perm] = np.arange(self.N)  # sequence -> sorted row
        self.sorted_lengths = self.lengths[self.perm]
        self.batch = np.array([(self.lengths > t).sum() for t in range(T)], np.int64)
        self.off = np.concatenate([[0], np.cumsum(self.batch)])[:-1]
        self.S = int(self.batch.sum())

    def pack_index(self, src_sorted: bool) -> np.ndarray:
        """Packed row -> row of a padded [T, N] tensor (sorted or in the user's order)."""
        out = []
        for t in range(self.T):
            rows = np.arange(self.batch[t])
            out.append(t * self.N + (rows if src_sorted else self.perm[rows]))
        return np.concatenate(out)

    def sort_index(self, groups: int = 1) -> np.ndarray:
        """Sorted row -> user row, for ``groups`` consecutive blocks of N rows."""
        return np.concatenate([g * self.N + self.perm for g in range(groups)])

    def unsort_index(self, groups: int = 1) -> np.ndarray:
        """User row -> sorted row, for ``groups`` consecutive blocks of N rows."""
        return np.concatenate([g * self.N + self.pos for g in range(groups)])

    def unsort_padded_index(self) -> np.ndarray:
        """User-order padded row (t, n) -> sorted padded row, -1 where t >= len[n]."""
        t = np.arange(self.T)[:, None]
        idx = t * self.N + self.pos[None, :]
        return np.where(t < self.lengths[None, :], idx, -1).reshape(-1)

    def sort_padded_index(self) -> np.ndarray:
        """Sorted padded row (t, i) -> user-order padded row, -1 where i >= batch[t]."""
        t = np.arange(self.T)[:, None]
        i = np.arange(self.N)[None, :]
        idx = t * self.N + self.perm[None, :]
        return np.where(i < self.batch[:, None], idx, -1).reshape(-1)

    def unpack_index(self) -> np.ndarray:
        """Sorted padded row (t, i) -> packed row, -1 where i >= batch[t]."""
        i = np.arange(self.N)[None, :]
        return np.where(i < self.batch[:, None], self.off[:, None] + i, -1).reshape(-1)

    def last_state_index(self, L: int, D: int, ltr) -> np.ndarray:
        """User row (l, d, n) -> row of a [L, D, T, N] state region holding the state after
        sequence n's last step in direction d (t = len-1 left to right, t = 0 right to left)."""
        out = []
        for l in range(L):
            for d in range(D):
                t_last = self.lengths - 1 if ltr(d) else np.zeros(self.N, np.int64)
                out.append(((l * D + d) * self.T + t_last) * self.N + self.pos)
        return np.concatenate(out)

    def new_rows(self, t: int) -> tuple[int, int]:
        """Rows [a, b) whose last valid step is t (they start at t right to left)."""
        nxt = self.batch[t + 1] if t + 1 < self.T else 0
        return int(nxt), int(self.batch[t])


def layer_rows(shape) -> int:
    """Rows of the layer GEMMs: T N, or the valid (packed) rows with sequence lengths."""
    lens = shape.ext.seq_lengths
    return shape.T * shape.N if lens is None else int(sum(lens))
