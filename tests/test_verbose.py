"""PYDNNL_VERBOSE=1: one line per primitive creation and per execution."""
from __future__ import annotations

import numpy as np

import pydnnl as dnnl

md_ = dnnl.memory.desc
dt = dnnl.memory.data_type
tag = dnnl.memory.format_tag


def _lines(text):
    return [ln for ln in text.splitlines() if ln.startswith("pydnnl_verbose,")]


def test_verbose_lines(cpu_engine, monkeypatch, capsys):
    dims = [2, 3, 4, 5]
    x = np.arange(120, dtype=np.float32).reshape(dims)
    src = dnnl.memory(md_(dims, dt.f32, tag.nchw), cpu_engine, x)
    dst = dnnl.memory(md_(dims, dt.f32, tag.nhwc), cpu_engine)
    s = dnnl.stream(cpu_engine)

    monkeypatch.delenv("PYDNNL_VERBOSE", raising=False)
    r = dnnl.reorder(src, dst)
    r.execute(s, src, dst)
    s.wait()
    assert _lines(capsys.readouterr().out) == []

    monkeypatch.setenv("PYDNNL_VERBOSE", "1")
    r = dnnl.reorder(src, dst)
    created = _lines(capsys.readouterr().out)
    assert len(created) == 1
    for _ in range(3):
        r.execute(s, src, dst)
    executed = _lines(capsys.readouterr().out)
    assert len(executed) == 3
    s.wait()
    assert np.array_equal(dst.to_numpy(), x)

    for line, action in [(created[0], "create")] + [(e, "exec") for e in executed]:
        fields = line.split(",")
        assert len(fields) == 7, line
        _, act, kind, impl, mds, info, ms = fields
        assert act == action
        assert kind == "reorder"
        assert impl == r.get_primitive_desc().impl_info_str() and "reorder" in impl
        # data type, layout and shape of both tensors
        assert "f32:nchw:2x3x4x5" in mds and "f32:nhwc:2x3x4x5" in mds
        assert "f32:nchw:2x3x4x5" in info and "f32:nhwc:2x3x4x5" in info
        assert float(ms) >= 0.0


def test_verbose_names_quantization_and_cross_type(cpu_engine, monkeypatch, capsys):
    monkeypatch.setenv("PYDNNL_VERBOSE", "1")
    attr = dnnl.primitive_attr()
    attr.set_scales_mask(dnnl.ARG_TO, 0)
    dnnl.reorder.primitive_desc(cpu_engine, md_([3, 4], dt.f32, tag.ab), cpu_engine,
                                md_([3, 4], dt.s8, tag.ba), attr)
    assert _lines(capsys.readouterr().out) == []  # a descriptor alone creates nothing
    dnnl.reorder(dnnl.reorder.primitive_desc(cpu_engine, md_([3, 4], dt.f32, tag.ab), cpu_engine,
                                             md_([3, 4], dt.s8, tag.ba), attr))
    (line,) = _lines(capsys.readouterr().out)
    assert "f32:ab:3x4" in line and "s8:ba:3x4" in line
