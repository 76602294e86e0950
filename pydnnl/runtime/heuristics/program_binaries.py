"""Which devices' OpenCL program binaries the kernel cache keeps on disk."""
from __future__ import annotations


def keeps_program_binaries(info) -> bool:
    """Whether the kernel cache stores and loads program binaries for the device of ``info``.
    Not PoCL's: reading a PoCL program's binary compiles its kernels' work-group functions
    there and then, 5-9 s a kernel on a 2-core EPYC (a batch-norm kernel: build 0.3 s, binary
    9.0 s), where building from source and compiling at the first launch takes 1.9 s and
    PoCL's own kernel cache keeps the result (a second process: 63 ms build, 11 ms first
    launch)."""
    return info.runtime != "pocl"
