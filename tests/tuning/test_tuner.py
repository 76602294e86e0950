"""The autotuner and the perf database: written, read back, survives corruption and
concurrent writers, and picks the fastest point of a tiny search space."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels.reorder import ReorderProblem, build_reorder, layout_of
from pydnnl.runtime.kernel_cache import get_kernel
from pydnnl.tuning import PerfDB, choose, search


def test_put_get_roundtrip(tmp_path):
    db = PerfDB(tmp_path / "p.sqlite")
    assert db.get("dev", "gemm", "k1") is None
    db.put("dev", "gemm", "k1", {"tile": 8}, 2.0)
    db.put("dev", "gemm", "k1", {"tile": 4}, 3.0)  # slower: not stored
    db.close()
    again = PerfDB(tmp_path / "p.sqlite")
    assert again.get("dev", "gemm", "k1") == ({"tile": 8}, 2.0)
    again.put("dev", "gemm", "k1", {"tile": 16}, 1.0)  # faster: replaces
    assert PerfDB(tmp_path / "p.sqlite").get("dev", "gemm", "k1") == ({"tile": 16}, 1.0)
    assert PerfDB(tmp_path / "p.sqlite").get("other-device", "gemm", "k1") is None


def test_corrupt_file_is_set_aside(tmp_path):
    p = tmp_path / "p.sqlite"
    p.write_bytes(b"this is not a database" * 100)
    with pytest.warns(RuntimeWarning, match="moved it to"):
        db = PerfDB(p)
        assert db.get("d", "f", "k") is None
    db.put("d", "f", "k", {"a": 1}, 1.0)
    assert PerfDB(p).get("d", "f", "k") == ({"a": 1}, 1.0)
    assert list(tmp_path.glob("p.sqlite.*.bad")), "the corrupt file was not kept aside"


def test_foreign_schema_is_set_aside(tmp_path):
    import sqlite3

    p = tmp_path / "p.sqlite"
    c = sqlite3.connect(p)
    c.execute("CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT)")
    c.execute("INSERT INTO meta VALUES ('schema', '999')")
    c.commit()
    c.close()
    with pytest.warns(RuntimeWarning, match="schema version 999"):
        assert PerfDB(p).get("d", "f", "k") is None


def test_concurrent_writers(tmp_path):
    p = tmp_path / "p.sqlite"
    code = textwrap.dedent(f"""
        import sys
        from pydnnl.tuning import PerfDB
        db = PerfDB({str(p)!r})
        w = int(sys.argv[1])
        for i in range(40):
            db.put("dev", "fam", f"key{{i}}", {{"writer": w}}, float(100 - w))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(w)]) for w in range(4)]
    assert all(pr.wait(timeout=120) == 0 for pr in procs)
    db = PerfDB(p)
    for i in range(40):
        params, ms = db.get("dev", "fam", f"key{i}")
        assert params == {"writer": 3} and ms == 97.0  # the fastest writer wins every key


def _reorder_launcher(engine, wg):
    md_a = dnnl.memory.desc([64, 256], dnnl.memory.data_type.f32, "ab")
    md_b = dnnl.memory.desc([64, 256], dnnl.memory.data_type.f32, "ba")
    p = ReorderProblem(dims=md_a.dims, src_dt=md_a.data_type, dst_dt=md_b.data_type,
                       src_layout=layout_of(md_a), dst_layout=layout_of(md_b),
                       src_nelems=md_a.nelems_physical(), dst_nelems=md_b.nelems_physical())
    k = get_kernel(engine, "reorder_tune_test", (p, wg), lambda: build_reorder(p, {"wg": wg}))
    a = dnnl.memory(md_a, engine, np.ones((64, 256), np.float32))
    b = dnnl.memory(md_b, engine)
    return lambda s: k(s, a.buffer, b.buffer)


def test_search_strategies_find_the_measured_minimum(cpu_engine):
    space = [{"wg": w} for w in (1, 4, 16, 64)]
    best, ms, results = search(cpu_engine, space, lambda p: _reorder_launcher(cpu_engine, p["wg"]),
                               "exhaustive", progress=False)
    assert len(results) == 4 and ms == min(r[1] for r in results) and best in space
    _, _, rnd = search(cpu_engine, space, lambda p: _reorder_launcher(cpu_engine, p["wg"]),
                       "random", budget=2, progress=False)
    assert len(rnd) == 2
    gbest, gms, gres = search(cpu_engine, space, lambda p: _reorder_launcher(cpu_engine, p["wg"]),
                              "greedy", start={"wg": 1}, progress=False)
    assert gms == min(r[1] for r in gres) and len(gres) == 4


def test_choose_modes(cpu_engine, tmp_path, monkeypatch):
    db = PerfDB(tmp_path / "p.sqlite")
    space = [{"wg": w} for w in (4, 16)]
    make = lambda p: _reorder_launcher(cpu_engine, p["wg"])  # noqa: E731
    monkeypatch.setenv("PYDNNL_TUNING", "none")
    assert choose(cpu_engine, "t", "k", {"wg": 4}, lambda: space, make, db) == {"wg": 4}
    monkeypatch.setenv("PYDNNL_TUNING", "db")
    assert choose(cpu_engine, "t", "k", {"wg": 4}, lambda: space, make, db) == {"wg": 4}
    assert db.get(cpu_engine.info.signature, "t", "'k'") is None  # db mode never searches
    monkeypatch.setenv("PYDNNL_TUNING", "exhaustive")
    best = choose(cpu_engine, "t", "k", {"wg": 4}, lambda: space, make, db)
    stored = db.get(cpu_engine.info.signature, "t", "'k'")
    assert stored is not None and stored[0] == best
    monkeypatch.setenv("PYDNNL_TUNING", "db")  # now the stored result is used
    assert choose(cpu_engine, "t", "k", {"wg": 999}, lambda: space, make, db) == best
    monkeypatch.setenv("PYDNNL_TUNING", "bogus")
    with pytest.raises(dnnl.error, match="PYDNNL_TUNING"):
        choose(cpu_engine, "t", "k", {"wg": 4}, lambda: space, make, db)
