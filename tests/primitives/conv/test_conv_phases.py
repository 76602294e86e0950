"""Strided backward data split into stride-1 phases (``pydnnl.primitives.conv.phases``),
composed in numpy and compared with the float64 reference's direct backward data."""
from __future__ import annotations

import numpy as np
import pytest

from pydnnl.primitives.conv.phases import phases_1d, phases_2d
from pydnnl.reference import conv as R

# (ih, iw, k, stride, dilate, pad_l, pad_r)
GEOMS = {
    "3x3_s2_p1": (8, 8, 3, 2, 0, 1, 1),
    "3x3_s2_p1_odd": (7, 9, 3, 2, 0, 1, 1),
    "3x3_s2_dilated": (9, 8, 3, 2, 1, 1, 0),
    "5x5_s2_asym": (9, 9, 5, 2, 0, 2, 1),
    "3x3_s3": (10, 9, 3, 3, 0, 1, 1),
    "2x2_s3_empty_phases": (9, 8, 2, 3, 0, 0, 0),
    "1x1_s2": (6, 7, 1, 2, 0, 0, 0),
    "3x3_s2_d2": (11, 11, 3, 2, 2, 2, 2),
}


def _by_phases(dy, w, src_shape, k, s, dil, pl):
    """diff_src from the phases: each a stride-1 sum over its taps of diff_dst."""
    n, ic, ih, iw = src_shape
    oh, ow = dy.shape[2:]
    out = np.full(src_shape, np.nan)
    for ph in phases_2d((ih, iw), (k, k), (s, s), (pl, pl), (dil, dil)):
        acc = np.zeros((n, ic, ph.y.count, ph.x.count))
        for j, kh in enumerate(ph.y.taps):
            for m, kw in enumerate(ph.x.taps):
                for a in range(ph.y.count):
                    oy = a + ph.y.off0 - j * ph.y.step
                    if not 0 <= oy < oh:
                        continue
                    for b in range(ph.x.count):
                        ox = b + ph.x.off0 - m * ph.x.step
                        if 0 <= ox < ow:
                            acc[:, :, a, b] += dy[:, :, oy, ox] @ w[:, :, kh, kw]
        out[:, :, ph.y.r::s, ph.x.r::s] = acc
    return out


@pytest.mark.parametrize("name", list(GEOMS))
def test_phases_compose_backward_data(name):
    ih, iw, k, s, d, pl, pr = GEOMS[name]
    oh = (ih + pl + pr - (d + 1) * (k - 1) - 1) // s + 1
    ow = (iw + pl + pr - (d + 1) * (k - 1) - 1) // s + 1
    rng = np.random.default_rng(len(name))
    dy = rng.standard_normal((2, 5, oh, ow))
    w = rng.standard_normal((5, 3, k, k))
    src_shape = (2, 3, ih, iw)
    want = R.conv_backward_data(dy, w, src_shape, [s, s], [d, d], [pl, pl], [pr, pr],
                                dtype=np.float64)
    got = _by_phases(dy, w, src_shape, k, s, d, pl)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_every_tap_in_one_phase():
    for k, s, d, p in [(3, 2, 0, 1), (5, 3, 1, 2), (2, 3, 0, 0), (7, 2, 0, 3)]:
        taps = [t for ph in phases_1d(20, k, s, p, d) for t in ph.taps]
        assert sorted(taps) == list(range(k)), (k, s, d, p)
    # a kernel narrower than its stride leaves phases without taps (zeros)
    assert [len(ph.taps) for ph in phases_1d(9, 2, 3, 0, 0)] == [1, 1, 0]
    # positions: every stride-th from r, below the size
    assert [ph.count for ph in phases_1d(7, 3, 2, 1, 0)] == [4, 3]
