"""Device rules of the integer GEMM (:mod:`pydnnl.kernels.gemm_int8`): its register tile and
whether it accumulates with ``cl_khr_integer_dot_product``.

Measured on Intel's CPU runtime (2-core AVX-512 Xeon with VNNI, 1024^3 u8 x s8 -> s32,
work-groups of 16 lanes along n, shared with other jobs): plain multiply-adds of the bytes
99-116 GOP/s at 4-8 rows x 1 column per lane; the extension's ``dot(uchar4, char4)`` 20-23
GOP/s and ``dot_acc_sat_4x8packed_us_int`` 8-12 GOP/s (the runtime calls them per lane
instead of vectorizing them), so CPUs never take them. GPUs that report the extension have
the instruction in hardware and take it.

VNNI is out of reach from OpenCL C there (same machine, later session): kernels that are not
vectorized across work-items (``intel_vec_len_hint(1)``) and multiply 32 s16 pairs per
vector the way ``vpmaddwd`` does compile to ``vpdpwssd`` with one product per 32-bit lane
plus ``vpmaddwd`` and ``vpaddd`` (the compiler splits even and odd halves), 80-120 GOP/s at
1024^3 for every register tile tried; inline assembly is dropped and x86 builtins are
unknown to the runtime's front end, so there is no ``vpdpbusd``.
"""
from __future__ import annotations

from ...engine import DeviceInfo
from ...kernels.gemm_int8 import MMA_BLOCK, Int8Params

# 128 x 128 tensor-core blocks where there are enough of them (H200, u8:s8:s32, ms, 64 -> 128:
# 4096^3 0.59 -> 0.41, 2048^3 0.093 -> 0.066, 8192x1024x1024 0.100 -> 0.083)
MMA_128 = True


def default_params(info: DeviceInfo, problem=None) -> Int8Params:
    """The tile for ``info``: 8 rows x 1 column per lane, 16 lanes (a float vector of
    AVX-512; a half warp); ``dot4`` where the device has integer dot products and is a GPU;
    NVIDIA GPUs with mma.sync (compute capability 8.0 on) take the tensor-core kernel where
    it covers the problem (panels of its blocks, else 4 rows x that many lanes): 128 x 128
    blocks where there are as many as compute units, else 64 x 64 (see ``MMA_128``)."""
    from .gemm import tensor_cores

    if info.is_gpu and info.vendor_family == "nvidia" and tensor_cores(info):
        block = MMA_BLOCK
        if problem is not None and MMA_128:
            blocks = -(-problem.m // 128) * -(-problem.n // 128) * problem.batch
            if blocks >= max(1, info.compute_units or 1):
                block = 128
        return Int8Params(rows=4, vecs=1, lanes=block, mma=True)
    lanes = 16 if info.is_cpu else max(16, min(info.simd_width, 64))
    return Int8Params(rows=8 if info.is_cpu else 4, vecs=1, lanes=lanes,
                      dot4=info.integer_dot_product and info.is_gpu)


def pack_split(info: DeviceInfo) -> int:
    """Work-items per column of the packing kernel: 16 on GPUs (H200, 4096 x 4096 weights:
    one work-item walking each column 0.27 ms), 1 on CPUs (a work-item per column is what
    their compilers vectorize)."""
    return 16 if info.is_gpu else 1
