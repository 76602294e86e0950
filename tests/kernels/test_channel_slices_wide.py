"""The wide form of the bias gradient's first pass (``ChannelSlices`` with ``vec`` channels
per work-item and ``row_lanes`` work-items per slice, added in local memory: GPUs' rule):
every slice's channel sums against numpy in float64, on every device here and under
Oclgrind; offsets aligned and not, ragged and empty last slices, a row stride past the
channels; the rule's choice per device; and the plain form's loopy equivalence untouched."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

from pydnnl.kernels.channel_sums import (
    ChannelSlices,
    build_channel_slices,
    build_channel_slices_loopy,
)
from pydnnl.runtime.heuristics.conv import bias_grad_slicing

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from oclgrind_helpers import KERNEL_PROBE_PRELUDE, has_oclgrind, run_probe  # noqa: E402
from printed_kernels import run_source  # noqa: E402


def _want(t, t_off, part, part_off, C, rs, nrows, rps, nslices):
    want = part.astype(np.float64).copy()
    rows = t[t_off:t_off + nrows * rs].reshape(nrows, rs)[:, :C].astype(np.float64)
    for s in range(nslices):
        want[part_off + s * C:part_off + (s + 1) * C] = rows[s * rps:(s + 1) * rps].sum(0)
    return want


# (channels, row stride, wg, vec, row lanes, nrows, rps, nslices, t_off)
CASES = [
    (64, 64, 64, 4, 16, 3136, 98, 32, 0),      # res2's 64 channels, long slices
    (256, 256, 64, 4, 4, 700, 16, 44, 8),     # a ragged last slice, an aligned offset
    (24, 40, 16, 4, 8, 50, 7, 9, 3),           # row stride past the channels, misaligned
    (12, 12, 64, 1, 16, 33, 4, 10, 1),         # scalar channels, an empty last slice
    (8, 8, 64, 4, 1, 20, 5, 4, 0),             # one row lane: float4s alone
]


@pytest.mark.parametrize("C, rs, wg, vec, L, nrows, rps, nslices, t_off", CASES)
def test_wide_slices_match_numpy(engine, C, rs, wg, vec, L, nrows, rps, nslices, t_off):
    p = ChannelSlices(channels=C, row_stride=rs, wg=wg, vec=vec, row_lanes=L)
    src = build_channel_slices(p)
    assert src.name == "pydnnl_channel_slices_wide"
    rng = np.random.default_rng(C + nrows)
    t = rng.standard_normal(t_off + nrows * rs + 3).astype(np.float32)
    part_off = 5
    part = rng.standard_normal(part_off + nslices * C + 7).astype(np.float32)
    got = run_source(engine, src, {"t": t, "part": part},
                     {"t_off": t_off, "part_off": part_off, "nrows": nrows, "rps": rps,
                      "nslices": nslices})["part"]
    want = _want(t, t_off, part, part_off, C, rs, nrows, rps, nslices)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * max(1.0, rps ** 0.5))


def test_fields_are_checked():
    with pytest.raises(ValueError, match="vec"):
        ChannelSlices(channels=6, row_stride=6, vec=4)
    with pytest.raises(ValueError, match="row_lanes"):
        ChannelSlices(channels=8, row_stride=8, row_lanes=3)
    with pytest.raises(ValueError, match="printed only"):
        build_channel_slices_loopy(ChannelSlices(channels=8, row_stride=8, vec=4))


def test_rule_per_device(engine):
    info = engine.info
    small = bias_grad_slicing(info, 3136, 64)
    big = bias_grad_slicing(info, 100352, 64)
    if info.is_gpu:
        assert small is None
        assert big == (16, 64, 4, 16)
        assert bias_grad_slicing(info, 100352, 3 * 64)[2] == 4
        assert bias_grad_slicing(info, 100352, 30)[2] == 1
    else:
        assert small == big == (256, 16, 1, 1)  # the plain form, loopy's kernel text


PROBE = "SEED = 4\n" + KERNEL_PROBE_PRELUDE + r"""
from pydnnl.kernels.channel_sums import ChannelSlices, build_channel_slices

for C, rs, vec, L, nrows, rps, nslices, t_off in ((24, 40, 4, 8, 50, 7, 9, 3),
                                                  (16, 16, 4, 4, 37, 10, 4, 4),
                                                  (12, 12, 1, 16, 33, 4, 10, 1)):
    src = build_channel_slices(ChannelSlices(channels=C, row_stride=rs, wg=64, vec=vec,
                                             row_lanes=L))
    t = rng.standard_normal(t_off + nrows * rs).astype(np.float32)
    part = np.zeros(2 + nslices * C, np.float32)
    T, P = buf(t), buf(part)
    Kernel(eng.context, eng.device, src)(s, T.buffer, P.buffer, np.int64(t_off), np.int64(2),
                                         np.int64(nrows), np.int64(rps), np.int64(nslices))
    s.wait()
    got = P.to_numpy()[2:].reshape(nslices, C)
    rows = t[t_off:].reshape(nrows, rs)[:, :C].astype(np.float64)
    want = np.stack([rows[i * rps:(i + 1) * rps].sum(0) for i in range(nslices)])
    results[f"{C}x{vec}x{L}"] = bool(np.abs(got - want).max() <= 1e-4)
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind platform is not installed")
def test_wide_slices_under_oclgrind():
    """Out-of-bounds accesses (the last row, misaligned float4s), races on the local sums,
    uninitialized reads, API misuse."""
    results = run_probe(PROBE)
    assert results and all(results.values()), results
