"""The CPU rule that sizes Winograd's chunks of images from the cache a core works from
(``heuristics.conv.winograd_chunk_mb``): closed form on made-up devices, and the default
parameters each direction's descriptor takes on the engine present (its result against numpy;
chunks of one image are covered by test_conv_solvers); the CPU rule that puts Winograd first
for backward weights of wide layers."""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from test_conv_helpers import Case, assert_close, run_op  # noqa: E402

import pydnnl as dnnl  # noqa: E402
from pydnnl.engine import DeviceInfo  # noqa: E402
from pydnnl.runtime.heuristics.conv import winograd_chunk_mb  # noqa: E402


def _info(kind: str, cache: int) -> DeviceInfo:
    return DeviceInfo(name="x", vendor="x", platform="x", driver_version="1", device_version="1",
                      type=kind, compute_units=2, global_mem_bytes=1 << 34,
                      local_mem_bytes=1 << 15, max_work_group_size=1024, max_clock_mhz=2000,
                      fp16=False, fp64=True, preferred_float_vector_width=16,
                      global_mem_cache_bytes=cache)


def test_rule_closed_form():
    assert winograd_chunk_mb(None) is None
    assert winograd_chunk_mb(_info("gpu", 50 << 20)) is None
    assert winograd_chunk_mb(_info("cpu", 2 << 20)) == 8.0
    # the reported cache is kept within 1-4 MiB (PoCL reports the shared last level)
    assert winograd_chunk_mb(_info("cpu", 480 << 20)) == 16.0
    assert winograd_chunk_mb(_info("cpu", 256 << 10)) == 4.0


@pytest.mark.parametrize("direction", ["fwd", "bwd_d", "bwd_w"])
def test_default_chunk_on_engine(engine, stream, direction):
    case = Case("wgrad", 3, 1, 8, 8, (9, 9), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1),
                grouped=False)
    res = run_op(engine, stream, "conv", direction, case, seed=3,
                 algorithm=dnnl.algorithm.convolution_winograd)
    assert_close(res, 3e-5, f"winograd {direction} default chunks")
    want = winograd_chunk_mb(engine.info)
    got = res.pd.get_solver_params()["chunk_mb"]
    assert got == (64 if want is None else want)


def test_wide_small_maps_take_winograd_backward_weights_on_cpus(engine):
    """CPUs: ResNet-50's res4a 3x3 (49 tiles at mb 1) and res5a at mb 32 (512 tiles) take
    Winograd for backward weights; res5a at mb 1 (16 tiles) keeps im2col + GEMM."""
    from pydnnl.conv_shapes import validate_conv
    from pydnnl.primitives.conv.solvers import heuristic_order

    if not engine.info.is_cpu:
        return

    def first(mb, c, hw):
        g = validate_conv((mb, c, hw, hw), (c, c, 3, 3), (1, 1), (0, 0), (1, 1), (1, 1))
        return heuristic_order("bwd_w", g, engine)[0]

    assert first(1, 256, 14) == "winograd_f2x3"
    assert first(32, 512, 7) == "winograd_f2x3"
    assert first(1, 512, 7) == "im2col_gemm"
