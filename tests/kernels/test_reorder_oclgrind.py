"""Reorder kernels under the Oclgrind simulator: no out-of-bounds access, no use of
uninitialized values, no data race, no API misuse, and right results.

Oclgrind reports problems only on stderr, so the kernels run in a subprocess whose stderr is
read here. Kernel caches are off so that every kernel is generated and built under Oclgrind.
"""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from oclgrind_helpers import has_oclgrind, run_probe  # noqa: E402

PROBE = r"""
import json
import numpy as np
import pydnnl as dnnl

md_, dt, tag = dnnl.memory.desc, dnnl.memory.data_type, dnnl.memory.format_tag
eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
rng = np.random.default_rng(3)
results = {}

def run(src, dst, args=None, attr=None):
    r = dnnl.reorder(src, dst, attr) if attr is not None else dnnl.reorder(src, dst)
    r.execute(s, args or {dnnl.ARG_FROM: src, dnnl.ARG_TO: dst})
    s.wait()

# a plain permutation
x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
src = dnnl.memory(md_(x.shape, dt.f32, tag.abcd), eng, x)
dst = dnnl.memory(md_(x.shape, dt.f32, tag.cdba), eng)
run(src, dst)
results["permutation"] = bool(np.array_equal(dst.read_raw(), np.transpose(x, (2, 3, 1, 0)).ravel()))

# a dimension longer than a work-group and not a multiple of it
y = rng.standard_normal((3, 37)).astype(np.float32)
src = dnnl.memory(md_(y.shape, dt.f32, tag.ab), eng, y)
dst = dnnl.memory(md_(y.shape, dt.f32, tag.ba), eng)
run(src, dst)
results["long_dim"] = bool(np.array_equal(dst.read_raw(), y.T.ravel()))

# blocked with padding (C = 10 in blocks of 8), both directions
z = rng.standard_normal((2, 10, 3, 3)).astype(np.float32)
src = dnnl.memory(md_(z.shape, dt.f32, tag.nchw), eng, z)
blk = dnnl.memory(md_(z.shape, dt.f32, tag.nChw8c), eng)
run(src, blk)
p = np.zeros((2, 16, 3, 3), np.float32)
p[:, :10] = z
ok = np.array_equal(blk.read_raw(), p.reshape(2, 2, 8, 3, 3).transpose(0, 1, 3, 4, 2).ravel())
# The source of the reverse direction is written by the host, not by the kernel above: Oclgrind's
# uninitialized-value plugin loses track of kernel writes into a buffer that
# clEnqueueFillBuffer touched before (its values are right; its shadow state is not).
blk_host = dnnl.memory(md_(z.shape, dt.f32, tag.nChw8c), eng, z)
back = dnnl.memory(md_(z.shape, dt.f32, tag.nhwc), eng)
run(blk_host, back)
results["blocked"] = bool(ok and np.array_equal(back.read_raw(), z.transpose(0, 2, 3, 1).ravel()))

# f32 -> f16
src = dnnl.memory(md_(x.shape, dt.f32, tag.abcd), eng, x)
half = dnnl.memory(md_(x.shape, dt.f16, tag.abcd), eng)
run(src, half)
results["f16"] = bool(np.array_equal(half.read_raw().view(np.uint16),
                                     x.astype(np.float16).view(np.uint16).ravel()))

# f32 -> s8 with per-channel scales and a zero point
q = (rng.standard_normal((2, 4, 3)) * 100).astype(np.float32)
attr = dnnl.primitive_attr()
attr.set_scales_mask(dnnl.ARG_TO, 1 << 1)
attr.set_zero_points_mask(dnnl.ARG_TO, 0)
sc = np.array([0.5, 1.0, 2.0, 0.25], np.float32)
src = dnnl.memory(md_(q.shape, dt.f32, tag.abc), eng, q)
s8 = dnnl.memory(md_(q.shape, dt.s8, tag.acb), eng)
run(src, s8, {dnnl.ARG_FROM: src, dnnl.ARG_TO: s8,
              dnnl.ARG_ATTR_SCALES | dnnl.ARG_TO: dnnl.memory(md_([4], dt.f32, tag.a), eng, sc),
              dnnl.ARG_ATTR_ZERO_POINTS | dnnl.ARG_TO: dnnl.memory(md_([1], dt.s32, tag.a), eng,
                                                                   np.array([3], np.int32))},
    attr)
exp = np.clip(np.rint(q.astype(np.float64) / sc[None, :, None] + 3), -128, 127).astype(np.int8)
results["s8_scales"] = bool(np.array_equal(s8.to_numpy(), exp))
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind simulator is not installed")
def test_reorder_kernels_clean_under_oclgrind():
    results = run_probe(PROBE)
    assert results == {"permutation": True, "long_dim": True, "blocked": True, "f16": True,
                       "s8_scales": True}
