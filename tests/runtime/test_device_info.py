"""DeviceInfo traits: derived once from OpenCL's answers, the same for every heuristic."""
from __future__ import annotations

import pydnnl as dnnl
from pydnnl.engine import _family, _runtime


def test_vendor_family_and_runtime_names():
    assert _family("NVIDIA Corporation") == "nvidia"
    assert _family("Advanced Micro Devices, Inc.") == "amd"
    assert _family("AMD EPYC 9B14") == "amd"
    assert _family("Intel(R) Corporation") == "intel"
    assert _family("ARM") == "arm"
    assert _family("Mystery Silicon") == "other"
    assert _runtime("Portable Computing Language") == "pocl"
    assert _runtime("Intel(R) OpenCL") == "intel"
    assert _runtime("NVIDIA CUDA") == "nvidia"
    assert _runtime("Oclgrind") == "oclgrind"


def test_listed_devices_have_consistent_traits():
    for info in dnnl.engine.list_devices():
        assert info.is_gpu == (info.type == "gpu") and info.is_cpu == (not info.is_gpu)
        assert info.simd_width >= 1 and info.compute_units >= 1
        assert len(info.max_work_item_sizes) >= 1 and info.local_mem_bytes >= 0
        assert info.inline_ptx == (info.runtime == "nvidia")
        if info.type == "cpu" and info.vendor_family in ("amd", "intel"):
            want = ("avx512" if info.simd_width >= 16 else "avx2" if info.simd_width >= 8
                    else "sse" if info.simd_width >= 4 else "unknown")
            assert info.arch == want
        assert all(isinstance(e, str) for e in info.extensions)


def test_core_cache_bytes_keeps_cpu_reports_within_a_core():
    from dataclasses import replace

    info = dnnl.engine.list_devices()[0]
    cpu = replace(info, type="cpu")
    mib = 1 << 20
    # Intel's runtime: a core's L2; PoCL: a whole shared last-level cache; unknown
    for reported, want in ((2 * mib, 2 * mib), (480 * mib, 4 * mib), (0, mib),
                           (256 << 10, mib)):
        assert replace(cpu, global_mem_cache_bytes=reported).core_cache_bytes == want
    gpu = replace(info, type="gpu")
    assert replace(gpu, global_mem_cache_bytes=50 * mib).core_cache_bytes == 50 * mib
    assert replace(gpu, global_mem_cache_bytes=0).core_cache_bytes == mib
