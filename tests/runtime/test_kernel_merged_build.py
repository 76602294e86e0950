"""Compilations queued together on the build thread become one OpenCL program: each kernel
computes what numpy does and what its own separate build computes, even where the sources
share kernel names, macros and loopy's helper functions; the merged binary is cached, so a
second process (asking for all kernels or only one of them) compiles nothing; a merged build
that fails falls back to one program per source, and only the bad source fails."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.error import runtime_error
from pydnnl.kernels.source import KernelSource
from pydnnl.runtime import kernel as K
from pydnnl.runtime import kernel_cache
from pydnnl.runtime.program_merge import merge_sources

# loopy's own preamble (floor division helpers defined by a macro), as its sources carry it
_LOOPY_HELPERS = r"""#define LOOPY_CALL_WITH_INTEGER_TYPES(MACRO_NAME) \
    MACRO_NAME(int32, int) \
    MACRO_NAME(int64, long)
#define LOOPY_DEFINE_FLOOR_DIV_POS_B(SUFFIX, TYPE) \
    static inline TYPE loopy_floor_div_pos_b_##SUFFIX(TYPE a, TYPE b) \
    { \
        if (a<0) \
            a = a - (b-1); \
        return a/b; \
    }
LOOPY_CALL_WITH_INTEGER_TYPES(LOOPY_DEFINE_FLOOR_DIV_POS_B)
#undef LOOPY_DEFINE_FLOOR_DIV_POS_B
#undef LOOPY_CALL_WITH_INTEGER_TYPES
"""


def _source(name: str, factor: int, itype: str, tag: int) -> KernelSource:
    """``x[i] = factor * x[i] + floor((i - 3) / 2)``, with a macro ``SCALE`` and loopy's
    ``gid`` macro (its type differs between sources) and helpers; ``tag`` keeps the source
    text apart from other tests' (the process shares equal sources' compilations)."""
    text = (f"#define gid(N) (({itype}) get_global_id(N))\n"
            f"#define SCALE {factor}.0f\n" + _LOOPY_HELPERS +
            f"\n/* {tag} */\n__kernel void __attribute__ ((reqd_work_group_size(1, 1, 1))) "
            f"{name}(__global float *__restrict__ x)\n{{\n"
            f"  {itype} i = gid(0);\n"
            f"  x[i] = SCALE * x[i] + (float) loopy_floor_div_pos_b_"
            f"{'int64' if itype == 'long' else 'int32'}(i - 3, 2);\n}}\n")
    return KernelSource(name, text, (8,), (1,), ("x",))


def _broken(name: str, tag: int) -> KernelSource:
    return KernelSource(name, f"/* {tag} */ __kernel void {name}(__global float *x) "
                              f"{{ x[0] = undefined_name; }}", (1,), (1,), ("x",))


def _expected(factor: int) -> np.ndarray:
    x = np.arange(8, dtype=np.float32)
    return factor * x + np.floor((np.arange(8) - 3) / 2).astype(np.float32)


_SPECS = [("scale", 3, "long"), ("scale", 5, "int"), ("other", 7, "long")]


def _run(engine, kernel) -> np.ndarray:
    import pyopencl as cl

    x = np.arange(8, dtype=np.float32)
    s = dnnl.stream(engine)
    buf = cl.Buffer(engine.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                    hostbuf=x)
    kernel(s, buf)
    cl.enqueue_copy(s.queue, x, buf)
    s.wait()
    return x


def _queued_together(engine, cache, requests):
    """The kernels for ``requests`` ((key, source) pairs), their compilations queued while
    the build thread is held, so that one drain takes them all."""
    release = threading.Event()
    K._build_thread().submit(release.wait)
    try:
        with kernel_cache.deferred_builds(wait=False) as pending:
            ks = [kernel_cache.get_kernel(engine, "test_merge", (cache, key),
                                          lambda s=src: s) for key, src in requests]
    finally:
        release.set()
    return ks, pending


@pytest.fixture()
def binary_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYDNNL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PYOPENCL_NO_CACHE", raising=False)
    monkeypatch.delenv("PYDNNL_NO_KERNEL_CACHE", raising=False)
    monkeypatch.delenv("PYDNNL_MERGE_BUILDS", raising=False)
    return tmp_path


def test_merge_sources_renames_and_scopes():
    srcs = [_source(n, f, t, 0) for n, f, t in _SPECS]
    text, names = merge_sources([(s.name, s.source) for s in srcs])
    assert names == ["scale", "scale__pd1", "other"]
    assert text.count("LOOPY_DEFINE_FLOOR_DIV_POS_B(SUFFIX, TYPE)") == 1  # helpers once
    assert text.count("#undef SCALE") == 3 and text.count("#undef gid") == 3
    # a kernel whose definition cannot be found is not merged
    assert merge_sources([("a", "__kernel void b(__global float *x) {}")]) is None


def test_merge_sources_declines_a_helper_defined_twice():
    """Two preambles that differ but define the same function would fail the merged build:
    the sources are declined (built one by one), where the same preamble twice is kept
    once."""
    def src(name, extra):
        return (name, "static inline int pd_h(int x) { return x + 1; }\n" + extra
                + f"__kernel void {name}(__global int *y) {{ y[0] = pd_h(y[0]); }}\n")

    assert merge_sources([src("a", ""), src("b", "")]) is not None
    assert merge_sources([src("a", ""), src("b", "static int pd_g(int x) { return x; }\n")]) \
        is None


def test_merged_build_equals_separate_builds(first_engine, binary_cache, monkeypatch):
    tag = abs(hash(str(binary_cache))) % 10**9
    reqs = [((n, f), _source(n, f, t, tag)) for n, f, t in _SPECS]
    before = K.build_costs()
    ks, pending = _queued_together(first_engine, str(binary_cache), reqs)
    kernel_cache.finish_builds(pending)
    after = K.build_costs()
    assert after["programs_merged"] - before["programs_merged"] == 3
    assert after["programs_built"] - before["programs_built"] == 1
    assert len({id(k.program) for k in ks}) == 1
    merged = [_run(first_engine, k) for k in ks]
    for (_, f, _), y in zip(_SPECS, merged):
        np.testing.assert_array_equal(y, _expected(f))

    # the same sources built one by one (merging off, another cache) compute the same
    monkeypatch.setenv("PYDNNL_MERGE_BUILDS", "0")
    monkeypatch.setenv("PYDNNL_CACHE_DIR", str(binary_cache / "separate"))
    reqs = [((n, f), _source(n, f, t, tag + 1)) for n, f, t in _SPECS]
    ks2, pending = _queued_together(first_engine, str(binary_cache / "separate"), reqs)
    kernel_cache.finish_builds(pending)
    assert len({id(k.program) for k in ks2}) == 3
    for y, k in zip(merged, ks2):
        np.testing.assert_array_equal(_run(first_engine, k), y)


PROBE = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import test_kernel_merged_build as t
import pydnnl as dnnl
from pydnnl.runtime import kernel_cache
from pydnnl.runtime.kernel import build_costs
eng = dnnl.engine(dnnl.engine.kind.any, 0)
tag, cache, which = int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
out = []
for i in which:
    n, f, ty = t._SPECS[i]
    k = kernel_cache.get_kernel(eng, "test_merge", (cache, (n, f)),
                                lambda: t._source(n, f, ty, tag))
    out.append([k.built_from, bool(np.array_equal(t._run(eng, k), t._expected(f)))])
kernel_cache.finish_pending()
print(json.dumps({"kernels": out, "costs": build_costs()}))
"""


@pytest.mark.parametrize("which", [[0, 1, 2], [1]], ids=["all", "subset"])
def test_second_process_loads_the_merged_binary(first_engine, binary_cache, which):
    from pydnnl.runtime.heuristics.program_binaries import keeps_program_binaries

    if not keeps_program_binaries(first_engine.info):
        pytest.skip(f"{first_engine.info.runtime}: no program binaries kept for this "
                    "runtime (heuristics.program_binaries)")
    tag = abs(hash(str(binary_cache))) % 10**9
    reqs = [((n, f), _source(n, f, t, tag)) for n, f, t in _SPECS]
    ks, pending = _queued_together(first_engine, str(binary_cache), reqs)
    kernel_cache.finish_builds(pending)
    assert len({id(k.program) for k in ks}) == 1
    assert len(list(binary_cache.glob("merged-*.bin"))) == 1
    assert len(list(binary_cache.glob("test_merge-*.merged"))) == 3
    env = dict(os.environ, PYDNNL_CACHE_DIR=str(binary_cache))
    r = subprocess.run([sys.executable, "-c", PROBE, os.path.dirname(__file__), str(tag),
                        str(binary_cache), json.dumps(which)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["kernels"] == [["binary", True]] * len(which)
    assert res["costs"]["programs_built"] == 0
    assert res["costs"]["programs_loaded"] == 1  # the merged program, once


def test_failing_source_falls_back_to_separate_builds(first_engine, binary_cache):
    tag = abs(hash(str(binary_cache))) % 10**9
    reqs = [(("good", 3), _source("good", 3, "long", tag)),
            (("bad", 0), _broken("bad_k", tag)),
            (("good", 5), _source("good", 5, "int", tag))]
    before = K.build_costs()
    (g3, bad, g5), pending = _queued_together(first_engine, str(binary_cache), reqs)
    with pytest.raises(runtime_error, match="bad_k: OpenCL build failed"):
        kernel_cache.finish_builds(pending)
    after = K.build_costs()
    assert after["merges_failed"] - before["merges_failed"] == 1
    assert after["programs_built"] - before["programs_built"] == 4  # merged, then 3 apart
    np.testing.assert_array_equal(_run(first_engine, g3), _expected(3))
    np.testing.assert_array_equal(_run(first_engine, g5), _expected(5))
    assert g3.program is not g5.program
    assert bad.failed
    assert not list(binary_cache.glob("merged-*.bin"))


@pytest.mark.parametrize("merge", ["1", "0"])
def test_one_text_under_two_kernel_names(first_engine, binary_cache, monkeypatch, merge):
    """Two requests whose sources are one text defining two kernels (dropout's forward and
    backward) share one compilation, merged or not, and each launches its own kernel; a
    kernel cache then keeps each under its own name."""
    monkeypatch.setenv("PYDNNL_MERGE_BUILDS", merge)
    tag = abs(hash(str(binary_cache))) % 10**9
    text = (f"/* {tag} */\n"
            "__kernel void twice(__global float *x) { x[get_global_id(0)] *= 2.0f; }\n"
            "__kernel void thrice(__global float *x) { x[get_global_id(0)] *= 3.0f; }\n")
    reqs = [(name, KernelSource(name, text, (8,), (1,), ("x",)))
            for name in ("twice", "thrice")]
    ks, pending = _queued_together(first_engine, str(binary_cache), reqs)
    kernel_cache.finish_builds(pending)
    x = np.arange(8, dtype=np.float32)
    for k, f in zip(ks, (2, 3)):
        assert k.kernel.function_name == k.name
        np.testing.assert_array_equal(_run(first_engine, k), f * x)


def test_requests_a_few_ms_apart_share_one_program(first_engine, binary_cache, monkeypatch):
    """A creation's kernels arrive one by one: the first finds the build thread idle, which
    gathers the requests that follow within ``_QUIET_S`` of each other instead of compiling
    it alone; a wait for a kernel starts the compilation at once (here the window is long,
    so that only the waits end it)."""
    import time

    tag = abs(hash(str(binary_cache))) % 10**9
    K.warm_up(first_engine.context, first_engine.device)
    K._build_thread().submit(int).result()  # the thread idle, its compiler started
    # a window far longer than a loaded machine's stalls: the wait at the end starts it
    monkeypatch.setattr(K, "_QUIET_S", 5.0)
    monkeypatch.setattr(K, "_HOLD_S", 5.0)
    before = K.build_costs()
    with kernel_cache.deferred_builds(wait=False) as pending:
        ks = []
        for n, f, t in _SPECS:
            ks.append(kernel_cache.get_kernel(first_engine, "test_merge",
                                              (str(binary_cache), (n, f)),
                                              lambda n=n, f=f, t=t: _source(n, f, t, tag)))
            time.sleep(0.001)
    kernel_cache.finish_builds(pending)
    after = K.build_costs()
    assert after["programs_built"] - before["programs_built"] == 1
    assert after["programs_merged"] - before["programs_merged"] == 3
    for (_, f, _), k in zip(_SPECS, ks):
        np.testing.assert_array_equal(_run(first_engine, k), _expected(f))

    # a wait starts the compilation at once, however long the thread would gather
    monkeypatch.setattr(K, "_QUIET_S", 30.0)
    monkeypatch.setattr(K, "_HOLD_S", 30.0)
    K._build_thread().submit(int).result()
    src = _source("alone", 9, "long", tag)
    t0 = time.perf_counter()
    k = kernel_cache.get_kernel(first_engine, "test_merge", (str(binary_cache), "alone"),
                                lambda: src)
    k.wait()
    assert time.perf_counter() - t0 < 20.0
    np.testing.assert_array_equal(_run(first_engine, k), _expected(9))
