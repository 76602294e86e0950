"""The kernel cache keeps OpenCL program binaries next to the sources on every device but
PoCL, whose binaries cost a compilation of every work-group function when read (see
``runtime/heuristics/program_binaries.py``): there a second request builds the source again
and PoCL's own cache spares the work-group compilation."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels.source import KernelSource
from pydnnl.runtime import kernel_cache
from pydnnl.runtime.heuristics.program_binaries import keeps_program_binaries

_SRC = """__kernel void twice(__global float *x, const float f)
{ const int i = get_global_id(0); x[i] = f * x[i] + %d.0f; }"""


def test_rule_by_runtime():
    for rt, keeps in (("pocl", False), ("intel", True), ("nvidia", True), ("amd", True),
                      ("other", True)):
        assert keeps_program_binaries(SimpleNamespace(runtime=rt)) is keeps, rt


def test_binaries_kept_where_the_rule_says(engine, tmp_path, monkeypatch):
    """A kernel built through the cache leaves a binary exactly where the device keeps them;
    asked again from a cold memory cache, it loads that binary or builds its source, and
    computes the same either way."""
    import pyopencl as cl

    monkeypatch.setenv("PYDNNL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PYOPENCL_NO_CACHE", raising=False)
    monkeypatch.delenv("PYDNNL_NO_KERNEL_CACHE", raising=False)
    tag = abs(hash(str(tmp_path))) % 1000  # a text no other test built in this process

    def build():
        return KernelSource("twice", _SRC % tag, (64,), None, ("x", "f"))

    s = dnnl.stream(engine)
    outs, froms = [], []
    for _ in range(2):
        kernel_cache._mem_cache.clear()
        k = kernel_cache.get_kernel(engine, "test_binaries", ("twice", tag), build)
        x = np.arange(64, dtype=np.float32)
        buf = cl.Buffer(engine.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                        hostbuf=x)
        k(s, buf, np.float32(2.0))
        cl.enqueue_copy(s.queue, x, buf)
        s.wait()
        outs.append(x)
        froms.append(k.built_from)
    keeps = keeps_program_binaries(engine.info)
    assert bool(list(Path(tmp_path).rglob("*.bin"))) is keeps
    assert froms == (["source", "binary"] if keeps else ["source", "source"])
    want = 2.0 * np.arange(64, dtype=np.float64) + tag
    for x in outs:
        np.testing.assert_array_equal(x, want.astype(np.float32))


@pytest.mark.parametrize("rt", ["pocl", "intel"])
def test_no_binary_path_where_none_is_kept(rt, tmp_path):
    info = SimpleNamespace(runtime=rt, signature="dev", device_version="3.0")
    path = kernel_cache._binary_path(SimpleNamespace(info=info), tmp_path / "fam-abc.json",
                                     KernelSource("k", "__kernel void k() {}", (1,), None, ()))
    assert (path is None) is (rt == "pocl")
