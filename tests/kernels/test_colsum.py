"""Column sums (bias gradients): one work-item per column, and several work-items per column
whose interleaved rows meet in local memory (the GPUs' form), against numpy; the second under
Oclgrind as well."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels.reductions import ColSum, build_colsum
from pydnnl.runtime.heuristics.reduction import colsum_row_lanes
from pydnnl.runtime.plan import Plan, Ref

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from oclgrind_helpers import has_oclgrind, run_probe  # noqa: E402

A = dnnl.memory.data_type.f32


def _run(engine, stream, p: ColSum, x: np.ndarray, out0: np.ndarray, i_off: int, o_off: int,
         nrows: int) -> np.ndarray:
    plan = Plan(engine, "colsum_test")
    plan.kernel("colsum", p, build_colsum, out=Ref(dnnl.ARG_DST), src=Ref(dnnl.ARG_SRC),
                o_off=o_off, i_off=i_off, nrows=nrows)
    src = dnnl.memory(dnnl.memory.desc([x.size], A, "a"), engine, x)
    dst = dnnl.memory(dnnl.memory.desc([out0.size], A, "a"), engine, out0)
    plan.execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    stream.wait()
    return dst.to_numpy()


@pytest.mark.parametrize("lanes", [1, 2, 16])
@pytest.mark.parametrize("accumulate", [False, True])
def test_colsum_matches_numpy(engine, stream, lanes, accumulate):
    """Widths off the work-group width, rows off the lane count, offsets into both buffers."""
    rng = np.random.default_rng(lanes)
    width, ld, nrows, i_off, o_off = 45, 53, 37, 7, 3
    x = rng.uniform(-1, 1, i_off + nrows * ld).astype(np.float32)
    out0 = rng.uniform(-1, 1, o_off + width + 2).astype(np.float32)
    got = _run(engine, stream, ColSum(width, ld, accumulate, wg=16, row_lanes=lanes), x, out0,
               i_off, o_off, nrows)
    cols = x[i_off:].reshape(nrows, ld)[:, :width].astype(np.float64).sum(0)
    want = out0.astype(np.float64).copy()
    want[o_off:o_off + width] = cols + (want[o_off:o_off + width] if accumulate else 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_row_lanes_rule():
    class Gpu:
        is_gpu = True

    class Cpu:
        is_gpu = False

    assert colsum_row_lanes(Gpu) > 1 and colsum_row_lanes(Cpu) == 1


PROBE = r"""
import json
import numpy as np
import pydnnl as dnnl
from pydnnl.kernels.reductions import ColSum, build_colsum
from pydnnl.runtime.plan import Plan, Ref

eng = dnnl.engine.from_name("Oclgrind")
s = dnnl.stream(eng)
rng = np.random.default_rng(2)
A = dnnl.memory.data_type.f32
x = rng.uniform(-1, 1, 5 + 11 * 20).astype(np.float32)
plan = Plan(eng, "colsum_probe")
plan.kernel("colsum", ColSum(19, 20, False, wg=8, row_lanes=4), build_colsum,
            out=Ref(dnnl.ARG_DST), src=Ref(dnnl.ARG_SRC), o_off=1, i_off=5, nrows=11)
src = dnnl.memory(dnnl.memory.desc([x.size], A, "a"), eng, x)
dst = dnnl.memory(dnnl.memory.desc([21], A, "a"), eng, np.zeros(21, np.float32))
plan.execute(s, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
s.wait()
want = x[5:].reshape(11, 20)[:, :19].astype(np.float64).sum(0)
print(json.dumps({"lanes": bool(np.allclose(dst.to_numpy()[1:20], want, rtol=1e-5, atol=1e-5))}))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="Oclgrind OpenCL platform not installed")
def test_colsum_lanes_under_oclgrind():
    results = run_probe(PROBE)
    assert results and all(results.values()), results
