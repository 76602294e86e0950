"""Device rules of the integer GEMM (:mod:`pydnnl.kernels.gemm_int8`): its register tile and
whether it accumulates with ``cl_khr_integer_dot_product``.

Measured on Intel's CPU runtime (2-core AVX-512 Xeon with VNNI, 1024^3 u8 x s8 -> s32,
work-groups of 16 lanes along n, shared with other jobs): plain multiply-adds of the bytes
99-116 GOP/s at 4-8 rows x 1 column per lane; the extension's ``dot(uchar4, char4)`` 20-23
GOP/s and ``dot_acc_sat_4x8packed_us_int`` 8-12 GOP/s (the runtime calls them per lane
instead of vectorizing them), so CPUs never take them. GPUs that report the extension have
the instruction in hardware and take it.
"""
from __future__ import annotations

from ...engine import DeviceInfo
from ...kernels.gemm_int8 import MMA_BLOCK, Int8Params


def default_params(info: DeviceInfo) -> Int8Params:
    """The tile for ``info``: 8 rows x 1 column per lane, 16 lanes (a float vector of
    AVX-512; a half warp); ``dot4`` where the device has integer dot products and is a GPU;
    NVIDIA GPUs with mma.sync (compute capability 8.0 on) take the tensor-core kernel where
    it covers the problem (panels of its 64-column blocks, else 4 rows x 64 lanes)."""
    from .gemm import _tensor_cores

    if info.is_gpu and info.vendor_family == "nvidia" and _tensor_cores(info):
        return Int8Params(rows=4, vecs=1, lanes=MMA_BLOCK, mma=True)
    lanes = 16 if info.is_cpu else max(16, min(info.simd_width, 64))
    return Int8Params(rows=8 if info.is_cpu else 4, vecs=1, lanes=lanes,
                      dot4=info.integer_dot_product and info.is_gpu)


def pack_split(info: DeviceInfo) -> int:
    """Work-items per column of the packing kernel: 16 on GPUs (H200, 4096 x 4096 weights:
    one work-item walking each column 0.27 ms), 1 on CPUs (a work-item per column is what
    their compilers vectorize)."""
    return 16 if info.is_gpu else 1
