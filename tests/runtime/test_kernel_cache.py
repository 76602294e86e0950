"""The on-disk kernel cache: a second process creating the same reorder does not regenerate it
(loopy is never imported) and gets the same, correct result."""
from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = r"""
import json, sys, time
import numpy as np
import pydnnl as dnnl
md_, dt, tag = dnnl.memory.desc, dnnl.memory.data_type, dnnl.memory.format_tag
eng = dnnl.engine(dnnl.engine.kind.any, 0)  # the first device: a CPU where one exists
s = dnnl.stream(eng)
dims = [2, 19, 3, 5]
x = np.linspace(-4, 4, int(np.prod(dims)), dtype=np.float32).reshape(dims)
src = dnnl.memory(md_(dims, dt.f32, tag.nchw), eng, x)
dst = dnnl.memory(md_(dims, dt.f32, tag.nChw16c), eng)
attr = dnnl.primitive_attr()
attr.set_scales_mask(dnnl.ARG_FROM, 0)
loopy_before = "loopy" in sys.modules
t0 = time.perf_counter()
r = dnnl.reorder(src, dst, attr)
t_create = time.perf_counter() - t0
sc = dnnl.memory(md_([1], dt.f32, tag.a), eng, np.array([0.5], np.float32))
r.execute(s, {dnnl.ARG_FROM: src, dnnl.ARG_TO: dst, dnnl.ARG_ATTR_SCALES | dnnl.ARG_FROM: sc})
s.wait()
raw = dst.read_raw()
# nChw16c: channels padded to 32, zeros in the padding
p = np.zeros((2, 32, 3, 5), np.float32)
p[:, :19] = 0.5 * x
expected = p.reshape(2, 2, 16, 3, 5).transpose(0, 1, 3, 4, 2).ravel()
from pydnnl.runtime import kernel_cache
from pydnnl.runtime.heuristics.program_binaries import keeps_program_binaries
print(json.dumps({"create_s": t_create, "loopy_before": loopy_before,
                  "keeps_binaries": keeps_program_binaries(eng.info),
                  "built_from": sorted({k.built_from for k in kernel_cache._mem_cache.values()}),
                  "loopy_after": "loopy" in sys.modules, "costs": kernel_cache.creation_costs(),
                  "correct": bool(np.array_equal(raw, expected))}))
"""


def _run(cache_dir, **extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYDNNL_NO_KERNEL_CACHE", "PYDNNL_VERBOSE")}
    env["PYDNNL_CACHE_DIR"] = str(cache_dir)
    env.update(extra)
    r = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_second_process_does_not_regenerate(tmp_path, record_property):
    cache = tmp_path / "kernels"
    first = _run(cache)
    assert first["correct"]
    assert not first["loopy_before"]  # importing pydnnl alone does not pull in loopy
    assert first["loopy_after"]  # the first process generated the kernel
    files = sorted(p.name for p in cache.iterdir())
    # the generated source, and the program binary for this device and driver where its
    # runtime's binaries are kept (not PoCL's: heuristics.program_binaries)
    keeps = first["keeps_binaries"]
    assert all(f.startswith("reorder-") for f in files)
    assert sorted(f.rsplit(".", 1)[1] for f in files) == (["bin", "json"] if keeps
                                                          else ["json"])
    source = next(f for f in files if f.endswith(".json"))
    assert first["built_from"] == ["source"]
    # creation_costs counts what happened: one kernel generated and compiled, none loaded
    c = first["costs"]
    assert (c["kernels_generated"], c["programs_built"], c["programs_loaded"]) == (1, 1, 0)
    assert c["generate_ms"] > 0 and c["build_ms"] > 0

    second = _run(cache)
    assert second["correct"]
    assert not second["loopy_after"], (
        "the second process imported loopy: the kernel was regenerated")
    c = second["costs"]
    assert c["kernels_generated"] == 0 and c["generate_ms"] == 0
    if keeps:
        assert second["built_from"] == ["binary"], "the second process compiled the source"
        assert (c["programs_built"], c["programs_loaded"], c["build_ms"]) == (0, 1, 0)
    else:
        assert second["built_from"] == ["source"]
        assert (c["programs_built"], c["programs_loaded"]) == (1, 0)
    assert sorted(p.name for p in cache.iterdir()) == files

    record_property("reorder_create_s_first_process", round(first["create_s"], 4))
    record_property("reorder_create_s_second_process", round(second["create_s"], 4))
    print(f"\nreorder creation: first process {first['create_s'] * 1e3:.1f} ms, "
          f"second process {second['create_s'] * 1e3:.1f} ms")

    if keeps:  # a damaged binary is compiled again from the source, not trusted
        binary = next(f for f in files if f.endswith(".bin"))
        (cache / binary).write_bytes(b"not a program")
        again = _run(cache)
        assert again["correct"] and again["built_from"] == ["source"]
        assert not again["loopy_after"]

    # a damaged cache entry is regenerated, not trusted
    (cache / source).write_text("{not json")
    third = _run(cache)
    assert third["correct"] and third["loopy_after"]
