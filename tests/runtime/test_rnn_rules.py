"""Device rules of the RNN family (pydnnl/runtime/heuristics/rnn.py) that read only traits."""
from __future__ import annotations

from dataclasses import replace

import pydnnl as dnnl
from pydnnl.runtime.heuristics import rnn as rules


def _info(kind: str, **traits):
    info = replace(dnnl.engine.list_devices()[0], type=kind)
    return replace(info, **traits)


def test_cell_wg_cpu_whole_rows_up_to_the_cap():
    cpu = _info("cpu", simd_width=16, max_work_group_size=8192)
    for dhc in (1, 20, 64, 128, 200, 500, rules.CPU_CELL_WG):
        assert rules.cell_wg(cpu, dhc) == dhc


def test_cell_wg_cpu_equal_groups_of_whole_vectors():
    cpu = _info("cpu", simd_width=16, max_work_group_size=8192)
    cap = rules.CPU_CELL_WG
    for dhc in (cap + 1, 760, 1024, 1760, 2048, 4000):
        wg = rules.cell_wg(cpu, dhc)
        groups = -(-dhc // wg)
        assert wg <= cap and wg % 16 == 0
        assert groups == -(-dhc // cap)  # no more groups than the cap needs
        assert groups * wg - dhc < 16 * groups  # padding below one vector per group
    assert rules.cell_wg(cpu, 760) == 384


def test_cell_wg_respects_the_device_limit_and_gpus_keep_a_warp():
    small = _info("cpu", simd_width=8, max_work_group_size=256)
    assert rules.cell_wg(small, 512) == 256
    assert rules.cell_wg(small, 300) % 8 == 0 and rules.cell_wg(small, 300) <= 256
    gpu = _info("gpu", simd_width=32, max_work_group_size=1024)
    assert rules.cell_wg(gpu, 512) == rules.GPU_CELL_WG
    assert rules.cell_wg(gpu, 16) == 16


def test_weights_panel_8wide_cpus_take_the_6x16_tile():
    """8-wide CPUs store inference weights in 16-column panels (8 where a gate is no whole
    number of 16) read by a 6x16 tile unrolled by 4, whatever tile the tuned GEMM has; 16-wide
    CPUs keep panels of one vector read by the tuned tile; GPUs store none."""
    from pydnnl.kernels.gemm import DEFAULT_CPU_PARAMS

    tuned8 = dict(DEFAULT_CPU_PARAMS, rows=4, cols=24, vec=8, packed_b=True)
    avx2 = _info("cpu", simd_width=8)
    for role in ("iter", "layer"):
        w, tile = rules.weights_panel(avx2, role, tuned8, 512)
        assert w == 16 and (tile["rows"], tile["cols"], tile["k_unroll"]) == (6, 16, 4)
        assert tile["vec"] == 8 and tile["packed_b"] and not tile["local_prefetch"]
        assert rules.weights_panel(avx2, role, tuned8, 24)[0] == 8
    tuned16 = dict(DEFAULT_CPU_PARAMS, rows=8, cols=48, vec=16, k_unroll=2, packed_b=True)
    avx512 = _info("cpu", simd_width=16)
    assert rules.weights_panel(avx512, "iter", tuned16, 512) == (16, None)
    assert rules.weights_panel(avx2, "iter", dict(tuned8, packed_b=False), 512) is None
    assert rules.weights_panel(_info("gpu", simd_width=32), "iter", tuned8, 512) is None


def test_cell_tanh_via_exp_cpu_inference_only():
    assert rules.cell_tanh_via_exp(_info("cpu", simd_width=8), training=False)
    assert not rules.cell_tanh_via_exp(_info("cpu", simd_width=8), training=True)
    assert not rules.cell_tanh_via_exp(_info("gpu", simd_width=32), training=False)
