"""The GPU weight gradient's k slices against one round of resident blocks (rule of
``heuristics.conv.one_round_splits``), checked on a device with an H200's traits."""
from dataclasses import replace
from types import SimpleNamespace

import pytest

from pydnnl.kernels.gemm import GemmProblem
from pydnnl.kernels.gemm_nv import NvTile
from pydnnl.primitives.conv.solvers.im2col_gemm import _split_count
from pydnnl.runtime.gemm import GemmShape
from pydnnl.runtime.heuristics.conv import nv_resident_blocks, one_round_splits
from pydnnl.runtime.heuristics.gemm import nv_tile

H200 = SimpleNamespace(info=SimpleNamespace(
    is_gpu=True, is_cpu=False, vendor_family="nvidia", compute_units=132,
    max_work_group_size=1024, max_work_item_sizes=(1024, 1024, 64), local_mem_bytes=48 * 1024,
    simd_width=32, inline_ptx=True, arch="sm_90"))


def tile(m, n, k, batch):
    """The SGEMM blocking the H200 rule picks for ``batch`` dense ``m x n x k`` GEMMs."""
    extra = dict(batch=batch, stride_a=m * k, stride_b=k * n, stride_c=m * n) \
        if batch > 1 else {}
    return nv_tile(H200.info, GemmProblem(m=m, n=n, k=k, lda=k, ldb=n, ldc=n, **extra))


def test_resident_blocks_follow_the_registers():
    assert nv_resident_blocks(NvTile(128, 128, 8, 8, 8)) == 2   # 256 work-items x ~120
    assert nv_resident_blocks(NvTile(64, 128, 16, 8, 8)) == 4
    assert nv_resident_blocks(NvTile(128, 64, 16, 8, 4)) == 3
    assert nv_resident_blocks(NvTile(64, 32, 16, 4, 4)) == 9


@pytest.mark.parametrize("m, n, k, cap, want", [
    (2304, 256, 6272, 8, 4),     # res4a_branch2b mb32 (im2col): 72 128x64 blocks a slice,
                                 # 396 fit (3 a unit): 4 slices
    (4608, 512, 1568, 2, 1),     # res5a_branch2b mb32: unsplit, 288 64x128 blocks fit
    (1152, 128, 12544, 16, 16),  # res3a_branch2b's chunk: 1152 thin blocks fit (9 a unit)
    (2048, 512, 1568, 2, 2),     # res5b_branch2a mb32: 256 64x128 blocks fit
])
def test_split_count_keeps_one_round(m, n, k, cap, want):
    shape = GemmShape(m=m, n=n, k=k, lda=k, ldb=n, ldc=n, math="strict")
    assert _split_count(H200, shape, cap) == want


def test_rule_leaves_other_devices_and_unknown_kernels_alone():
    cpu = SimpleNamespace(is_gpu=False, compute_units=2)
    assert one_round_splits(cpu, 6272, 8, 512, lambda s: (10 ** 6, 1)) == 8
    assert one_round_splits(H200.info, 6272, 8, 512, lambda s: None) == 8
    # blocks overflow at every count: the first count stays
    assert one_round_splits(H200.info, 6272, 8, 512, lambda s: (10 ** 6, 2)) == 8
    # the largest divisor below the first count whose blocks fit, slices >= min_k
    assert one_round_splits(H200.info, 6272, 8, 512, lambda s: (36 * s, 2)) == 7
    assert one_round_splits(H200.info, 6272, 8, 1024, lambda s: (36 * s, 2)) == 4


def test_batched_slices_with_128_wide_entries_take_the_block_kernels():
    """A weight gradient's k slices of 1152 x 128 (v1.5 res3a_branch2b at mb 32: 9 times as
    tall as wide) take the SGEMM's 64x64 blocks of 8x4, slices 4 times as tall as wide
    (res4b_branch2a's 1024 x 256) its 128x64 ones; alone, the thin tiles (k <= 1024) or the
    loopy family stay."""
    got = tile(1152, 128, 784, 16)
    assert got is not None and (got.bm, got.bn, got.tm, got.tn) == (64, 64, 8, 4)
    got = tile(1024, 256, 784, 16)
    assert got is not None and (got.bm, got.bn, got.tm, got.tn) == (128, 64, 8, 4)
    # two slices give fewer 64x64 blocks than compute units: the 128x64 ones
    assert (tile(1152, 128, 784, 2).bm, tile(1152, 128, 784, 2).bn) == (128, 64)
    thin = tile(1152, 128, 784, 1)
    assert thin is not None and (thin.tm, thin.tn) == (4, 4)
    assert tile(1152, 128, 2048, 1) is None         # long k alone: the loopy family
    assert tile(1152, 128, 2048, 8) is not None
    # short slices of 128-wide entries: 128x64 blocks (Winograd res3a's 3136 x 128 x 128
    # products ran 134 -> 110 us on them against the thin ones)
    assert (tile(1152, 128, 256, 16).bm, tile(1152, 128, 256, 16).bn) == (128, 64)


def test_batched_64_wide_slices_by_their_long_side():
    """Batched slices with k >= 512 and a 64-wide side: res2a's weight-gradient slices
    (64 x 256 x 784 by 128) take 64x64 blocks of 8x4, Winograd's 64 x 64 products the thin
    tiles, 256 x 64 (n = 64, m >= 128) the 128x64 blocks; a lone 64 x 256 GEMM keeps the loopy
    family (its long side is short of 1024)."""
    want = {(64, 256): (64, 64, 8, 4), (64, 64): (32, 64, 4, 4), (256, 64): (128, 64, 8, 4)}
    for (m, n), blocking in want.items():
        t = tile(m, n, 784, 128)
        assert t is not None and (t.bm, t.bn, t.tm, t.tn) == blocking, (m, n, t)
    assert tile(64, 256, 784, 1) is None
    assert tile(64, 64, 392, 128) is None  # short slices: the loopy family


@pytest.mark.parametrize("T, ic, oc, want_cpu, want_gpu", [
    (3136, 128, 128, 8, 4),   # res3a mb32 chunk: 784-tile slices
    (1568, 256, 256, 4, 2),
    (512, 512, 512, 2, 1),    # res5a mb32: one slice, 16 products of 512 x 512
    (6272, 64, 64, 16, 8),    # res2a mb32 chunk
    (784, 64, 64, 2, 2),      # res2a mb1: 16 products of one slice are too few blocks
    (196, 128, 128, 1, 1),
])
def test_winograd_wgrad_slices(T, ic, oc, want_cpu, want_gpu):
    from pydnnl.primitives.conv.solvers.winograd_f2x3 import _slices

    cpu = SimpleNamespace(info=SimpleNamespace(is_gpu=False, compute_units=2))
    assert _slices(T, 1, cpu, ic, oc, 1) == 1
    assert _slices(T, 32, None, ic, oc, 1) == want_cpu
    assert _slices(T, 32, H200, ic, oc, 1) == want_gpu


def test_few_batched_blocks_keep_the_loopy_family():
    """A backward data's two k slices at mb 1 (res4a_branch2c: 196 x 256 x 512 by 2) give
    too few blocks for the SGEMM's block or thin kernels."""
    m, n, k = 196, 256, 512
    pr = GemmProblem(m=m, n=n, k=k, lda=1024, ldb=n, ldc=n, batch=2, stride_a=k,
                     stride_b=k * n, stride_c=m * n)
    assert nv_tile(H200.info, pr) is None
    pr = GemmProblem(m=64, n=256, k=k, lda=k, ldb=n, ldc=n, batch=2, stride_a=64 * k,
                     stride_b=k * n, stride_c=64 * n)
    assert nv_tile(H200.info, pr) is None


def test_winograd_res3a_products_take_the_blocks():
    """Winograd res3a's backward weights at mb 32 (16 x 4 products of 128 x 128 x 784,
    A transposed, B plain): 128 128x64 blocks, the block kernels (not 64x128: slower on
    that form)."""
    pr = GemmProblem(m=128, n=128, k=784, lda=128, ldb=128, ldc=128, trans_a=True, batch=64,
                     stride_a=784 * 128, stride_b=784 * 128, stride_c=128 * 128)
    t = nv_tile(H200.info, pr)
    assert t is not None and (t.bm, t.bn) == (128, 64)


def test_cpu_weight_gradient_slices():
    """CPUs cut a short backward-weights GEMM's long k into the fewest slices whose A and B
    fit half the core's cache (a divisor of k, >= 512 each); wide ones, short k and
    transposed A stay whole."""
    from pydnnl.runtime.heuristics.conv import cpu_wgrad_slices

    cpu = SimpleNamespace(is_gpu=False, core_cache_bytes=2 << 20)
    assert cpu_wgrad_slices(cpu, 64, 64, 50176, 64) == 28      # res2a_branch2a, mb 32 chunk
    assert cpu_wgrad_slices(cpu, 64, 256, 50176, 64) == 64     # res2a_branch2c
    assert cpu_wgrad_slices(cpu, 147, 64, 12544, 64) == 14     # conv1, mb 1
    assert cpu_wgrad_slices(cpu, 128, 512, 25088, 64) == 49    # slices of 512 at the least
    assert cpu_wgrad_slices(cpu, 64, 256, 50176, 16) == 16     # the cap
    assert cpu_wgrad_slices(cpu, 256, 1024, 6272, 64) == 1     # wide B
    assert cpu_wgrad_slices(cpu, 1024, 256, 6272, 64) == 1     # many rows
    assert cpu_wgrad_slices(cpu, 64, 64, 3136, 64) == 2        # res2a_branch2a, mb 1
    assert cpu_wgrad_slices(cpu, 64, 64, 2048, 64) == 1        # fits the cache whole
    shape = GemmShape(m=64, n=64, k=50176, lda=64, ldb=64, ldc=64, trans_a=True)
    eng = SimpleNamespace(info=cpu)
    assert _split_count(eng, shape, 1, 64) == 1  # A transposed
    assert _split_count(eng, replace(shape, trans_a=False), 1, 64) == 28
    assert _split_count(None, replace(shape, trans_a=False), 1, 64) == 64  # dry: the most
    # an explicit count (solver_params split_k) cuts as asked, whatever the rule
    assert _split_count(eng, replace(shape, trans_a=False), 8) == 8


def test_batched_products_take_the_128x64_blocks():
    """Winograd's 16 products on the SGEMM take 128x64 blocks: forward / backward data with
    a 64-wide side and k = channels (res2a 6272 x 64 x 64), both sides >= 128 (res4a, res5a:
    where 128x128 blocks were picked before); tall ones whose n is 128 (res3a's 3136 x 128)
    the 64x128 blocks; tensor-core tiles are left alone."""
    for m, n, k in ((6272, 64, 64), (3136, 128, 128), (1568, 256, 256), (512, 512, 512)):
        t = tile(m, n, k, 16)
        want = (64, 128) if (m, n) == (3136, 128) else (128, 64)
        assert t is not None and (t.bm, t.bn) == want, (m, n, k, t)
    pr = GemmProblem(m=512, n=512, k=512, lda=512, ldb=512, ldc=512, batch=16,
                     stride_a=512 * 512, stride_b=512 * 512, stride_c=512 * 512)
    assert nv_tile(H200.info, pr, "tf32").mma == "tf32"
