"""Device rules of the GEMM's B packers (:meth:`pydnnl.runtime.gemm.Gemm.packer`)."""
from __future__ import annotations


def runtime_packer(info) -> bool:
    """Whether B is packed by the one packer per transposition that takes every size at run
    time (:func:`pydnnl.kernels.pack_source.pack_b_runtime_source`) rather than one baked
    packer per k, n, ``ldb``, panel width and matrix count. CPUs: yes. On Intel's CPU
    runtime (2-core AVX-512 Xeon) a packer cost 15-17 ms of compilation inside a merged
    program, and a GRU 512 T=50 N=64 training pair asked for 7 baked ones, 2 run-time
    ones; their run time: see the commit that added this rule. GPUs keep the baked packers
    until measured there."""
    return not info.is_gpu
