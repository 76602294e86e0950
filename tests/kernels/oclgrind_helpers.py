"""Running kernels under the Oclgrind simulator: it reports invalid accesses, races and
uninitialized reads on stderr only, so a probe script runs in a subprocess whose stderr is
read."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pyopencl as cl

# pyopencl probes CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV (0x4000) whenever it creates a kernel,
# which Oclgrind's API checker reports; that exact block is not ours
PYOPENCL_NV_PROBE = ("Oclgrind - OpenCL runtime error detected\n\tFunction: clGetDeviceInfo\n"
                     "\tError:    CL_INVALID_VALUE\n\tFor argument 'param_name'\n")


# The start of a convolution probe: imports, the simulator's engine and stream, a seeded
# generator ``rng`` (the probe sets ``SEED`` first), the ``results`` dict the probe prints,
# a relative-error test and a memory helper.
CONV_PROBE_PRELUDE = r"""
import json
import numpy as np
import pydnnl as dnnl
from pydnnl.primitives.conv import (convolution_forward, convolution_backward_data,
    convolution_backward_weights, deconvolution_forward)
from pydnnl.reference import conv as R

MD, F32 = dnnl.memory.desc, dnnl.memory.data_type.f32
eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
rng = np.random.default_rng(SEED)
results = {}

def close(got, ref, rtol=1e-5):
    return bool(np.abs(got - ref).max() <= rtol * np.abs(ref).max())

def mem(md, a=None):
    return dnnl.memory(md, eng, a) if a is not None else dnnl.memory(md, eng)
"""


# The start of a probe of printed kernels launched directly: imports, the simulator's engine
# and stream, a seeded generator ``rng`` (the probe sets ``SEED`` first), the ``results``
# dict the probe prints and ``buf``, a flat f32 memory of an array.
KERNEL_PROBE_PRELUDE = r"""
import json
import numpy as np
import pydnnl as dnnl
from pydnnl.runtime.kernel import Kernel

eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
rng = np.random.default_rng(SEED)
results = {}

def buf(a):
    md = dnnl.memory.desc([a.size], dnnl.memory.data_type.f32, dnnl.memory.format_tag.a)
    return dnnl.memory(md, eng, a.reshape(-1))
"""

# The same for the hand-written NVIDIA SGEMM (plain OpenCL C).
GEMM_NV_PROBE_PRELUDE = KERNEL_PROBE_PRELUDE + r"""
from pydnnl.kernels.gemm import GemmProblem
from pydnnl.kernels.gemm_nv import NvTile, build_gemm_nv, counters_at, workspace
"""


def has_oclgrind() -> bool:
    try:
        return any("oclgrind" in p.name.lower() for p in cl.get_platforms())
    except cl.Error:
        return False


def run_probe(probe: str, allow=None, **extra_env) -> dict:
    """Run ``probe`` (Python source printing a JSON dict on its last line) with every check of
    Oclgrind on; fail on any report (except those ``allow(report)`` accepts, a report being
    one blank-line separated block of stderr); return the dict."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYDNNL_VERBOSE", "PYDNNL_DEVICE")}
    env.update(PYOPENCL_NO_CACHE="1", PYDNNL_NO_KERNEL_CACHE="1", OCLGRIND_CHECK_API="1",
               OCLGRIND_DATA_RACES="1", OCLGRIND_UNINITIALIZED="1")
    env.update(extra_env)
    r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    stderr = r.stderr.replace(PYOPENCL_NV_PROBE, "")
    if allow is not None:
        stderr = "\n\n".join(b for b in re.split(r"\n\s*\n(?=\S)", stderr)
                             if b.strip() and not allow(b))
    problems = [ln for ln in stderr.splitlines()
                if re.search(r"invalid|error|uninitiali[sz]ed|race", ln, re.IGNORECASE)]
    assert not problems, "Oclgrind reported:\n" + stderr
    return json.loads(r.stdout.strip().splitlines()[-1])
