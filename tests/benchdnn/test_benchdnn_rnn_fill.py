"""benchdnn --rnn's f32 weights follow oneDNN's benchdnn (one non-zero per output column), the
filling its tolerance is made for; the check still finds a weight in the wrong row."""
from __future__ import annotations

import numpy as np

import pydnnl as dnnl
from pydnnl.benchdnn import rnn as R


def test_sparse_weights_are_onednns_pattern():
    w = R.sparse_weights([2, 2, 7, 4, 5])
    for l in range(2):
        for d in range(2):
            for g in range(4):
                for o in range(5):
                    col = w[l, d, :, g, o]
                    row = (19 * o + 7 * g + 11 * d + 13 * l) % 7
                    assert col[row] == 0.25 and np.count_nonzero(col) == 1
    p = R.sparse_weights([1, 2, 6, 3])  # projection [L, D, DHC, DIC]: factor 1
    assert p[0, 1, (19 * 2 + 11) % 6, 2] == 1.0 and np.count_nonzero(p) == 6


def test_the_check_finds_a_misplaced_weight(engine):
    """1760 channels: the dense weights of before failed the tolerance in a correct run;
    with oneDNN's filling a correct run passes, and one weight moved to another row (the
    primitive's copy only) fails it."""
    o = R.RnnOptions(alg="VANILLA_LSTM")
    b = R.RnnBench(engine, R.parse_problem("l1t3mb2sic1760"), o)
    assert b.check() <= R.tolerance(b.p, o)
    w = np.array(b.values[dnnl.ARG_WEIGHTS_ITER], copy=True)
    row = int(np.flatnonzero(w[0, 0, :, 1, 17])[0])
    w[0, 0, row, 1, 17], w[0, 0, (row + 1) % 1760, 1, 17] = 0.0, w[0, 0, row, 1, 17]
    b.args[dnnl.ARG_WEIGHTS_ITER].write(w)
    assert b.check() > R.tolerance(b.p, o)
