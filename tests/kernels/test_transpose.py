"""Transposes (the RNN backward's copies of its weights and activations): one work-item per
element, and local-memory tiles (the GPUs' form), against numpy; the tiled one under Oclgrind
as well."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels.reductions import Transpose, build_transpose
from pydnnl.runtime.heuristics.reduction import transpose_tile
from pydnnl.runtime.plan import Plan, Ref

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from oclgrind_helpers import has_oclgrind, run_probe  # noqa: E402

A = dnnl.memory.data_type.f32


@pytest.mark.parametrize("tile", [0, 8, 32])
@pytest.mark.parametrize("nrows", [37, 64])
def test_transpose_matches_numpy(engine, stream, tile, nrows):
    """Columns and rows off the tile, a leading dimension wider than the columns, offsets into
    both buffers, and the output past the block left alone."""
    rng = np.random.default_rng(tile + nrows)
    cols, ld, i_off, o_off = 45, 53, 7, 3
    x = rng.uniform(-1, 1, i_off + nrows * ld).astype(np.float32)
    out0 = rng.uniform(-1, 1, o_off + cols * nrows + 5).astype(np.float32)
    plan = Plan(engine, "transpose_test")
    plan.kernel("transpose", Transpose(cols, ld, tile=tile), build_transpose,
                out=Ref(dnnl.ARG_DST), src=Ref(dnnl.ARG_SRC), o_off=o_off, i_off=i_off,
                nrows=nrows)
    src = dnnl.memory(dnnl.memory.desc([x.size], A, "a"), engine, x)
    dst = dnnl.memory(dnnl.memory.desc([out0.size], A, "a"), engine, out0)
    plan.execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    stream.wait()
    want = out0.copy()
    want[o_off:o_off + cols * nrows] = x[i_off:].reshape(nrows, ld)[:, :cols].T.ravel()
    np.testing.assert_array_equal(dst.to_numpy(), want)


def test_transpose_tile_rule():
    class Gpu:
        is_gpu = True

    class Cpu:
        is_gpu = False

    assert transpose_tile(Gpu) > 0 and transpose_tile(Cpu) == 0


PROBE = r"""
import json
import numpy as np
import pydnnl as dnnl
from pydnnl.kernels.reductions import Transpose, build_transpose
from pydnnl.runtime.plan import Plan, Ref

eng = dnnl.engine.from_name("Oclgrind")
s = dnnl.stream(eng)
rng = np.random.default_rng(2)
A = dnnl.memory.data_type.f32
x = rng.uniform(-1, 1, 5 + 11 * 20).astype(np.float32)
plan = Plan(eng, "transpose_probe")
plan.kernel("transpose", Transpose(19, 20, tile=8), build_transpose,
            out=Ref(dnnl.ARG_DST), src=Ref(dnnl.ARG_SRC), o_off=1, i_off=5, nrows=11)
src = dnnl.memory(dnnl.memory.desc([x.size], A, "a"), eng, x)
dst = dnnl.memory(dnnl.memory.desc([1 + 19 * 11], A, "a"), eng, np.zeros(1 + 19 * 11, np.float32))
plan.execute(s, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
s.wait()
want = x[5:].reshape(11, 20)[:, :19].T.ravel()
print(json.dumps({"tiled": bool(np.array_equal(dst.to_numpy()[1:], want))}))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="Oclgrind OpenCL platform not installed")
def test_tiled_transpose_under_oclgrind():
    results = run_probe(PROBE)
    assert results and all(results.values()), results
