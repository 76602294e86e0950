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
