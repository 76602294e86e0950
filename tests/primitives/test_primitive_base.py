"""What every primitive shares: descriptor queries, scratchpad mode, argument validation.

A toy primitive defined here (dst = src + bias, with a workspace and a scratchpad) exercises the
base classes independently of any real operation; the reorder's queries are checked too.
"""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.primitives.base import ArgSpec

md_ = dnnl.memory.desc
dt = dnnl.memory.data_type
tag = dnnl.memory.format_tag
q = dnnl.query


class toy_pd(dnnl.primitive_desc_base):
    _kind = "toy"

    def __init__(self, eng, src_md, bias_md, dst_md, attr=None, scratch_bytes=256):
        self._init_base(eng, attr)
        self._args = {
            dnnl.ARG_SRC: ArgSpec(src_md, False),
            dnnl.ARG_BIAS: ArgSpec(bias_md, False, required=False),
            dnnl.ARG_DST: ArgSpec(dst_md, True),
            dnnl.ARG_WORKSPACE: ArgSpec(md_([7], dt.f32, tag.a), True),
        }
        self._impl = "toy:numpy"
        self._finish_scratchpad(scratch_bytes)


class toy(dnnl.primitive):
    def _create(self):
        self.created = True

    def _execute(self, s, args):
        x = args[dnnl.ARG_SRC].to_numpy()
        if dnnl.ARG_BIAS in args:
            x = x + args[dnnl.ARG_BIAS].to_numpy()
        args[dnnl.ARG_DST].write(x)


@pytest.fixture(scope="module")
def mds():
    return md_([2, 3], dt.f32, tag.ab), md_([2, 3], dt.f32, tag.ba), md_([2, 3], dt.f32, tag.ab)


def test_queries(cpu_engine, mds):
    src, bias, dst = mds
    pd = toy_pd(cpu_engine, src, bias, dst)
    assert pd.src_desc() == src and pd.src_desc(1).is_zero()
    assert pd.dst_desc() == dst and pd.dst_desc(3).is_zero()
    assert pd.weights_desc().is_zero()
    assert pd.weights_desc(4) == bias  # the bias is the weights family's fifth member (41)
    assert pd.workspace_desc() == md_([7], dt.f32, tag.a)
    assert pd.scratchpad_desc() == md_([256], dt.u8, tag.a)
    assert pd.query_md(q.src_md) == src
    assert pd.query_md(q.dst_md, 0) == dst
    assert pd.query_md(q.workspace_md) == pd.workspace_desc()
    assert pd.query_md(q.scratchpad_md) == pd.scratchpad_desc()
    assert pd.query_md(q.exec_arg_md, dnnl.ARG_BIAS) == bias
    assert pd.query_md(q.exec_arg_md, dnnl.ARG_DIFF_SRC).is_zero()
    assert pd.query_md(q.diff_src_md).is_zero() and pd.diff_dst_desc().is_zero()
    assert pd.diff_weights_desc().is_zero()
    assert pd.impl_info_str() == "toy:numpy"
    assert pd.get_engine() == cpu_engine
    assert pd.get_primitive_attr().get_scratchpad_mode() == dnnl.scratchpad_mode.library


def test_scratchpad_mode_user_requires_the_buffer(cpu_engine, mds):
    src, bias, dst = mds
    attr = dnnl.primitive_attr()
    attr.set_scratchpad_mode(dnnl.scratchpad_mode.user)
    assert attr.get_scratchpad_mode() == dnnl.scratchpad_mode.user
    pd = toy_pd(cpu_engine, src, bias, dst, attr)
    assert pd.query_md(q.exec_arg_md, dnnl.ARG_SCRATCHPAD) == pd.scratchpad_desc()
    p = toy(pd)
    s = dnnl.stream(cpu_engine)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    base = {dnnl.ARG_SRC: dnnl.memory(src, cpu_engine, x),
            dnnl.ARG_DST: dnnl.memory(dst, cpu_engine, np.full((2, 3), 9, np.float32)),
            dnnl.ARG_WORKSPACE: dnnl.memory(pd.workspace_desc(), cpu_engine)}
    with pytest.raises(dnnl.invalid_arguments, match="missing argument ARG_SCRATCHPAD"):
        p.execute(s, base)
    assert np.all(base[dnnl.ARG_DST].to_numpy() == 9)
    p.execute(s, {**base, dnnl.ARG_SCRATCHPAD: dnnl.memory(pd.scratchpad_desc(), cpu_engine)})
    s.wait()
    assert np.array_equal(base[dnnl.ARG_DST].to_numpy(), x)
    # library mode: the scratchpad is not an argument
    lib = toy(toy_pd(cpu_engine, src, bias, dst))
    with pytest.raises(dnnl.invalid_arguments, match="unexpected argument ARG_SCRATCHPAD"):
        lib.execute(s, {**base, dnnl.ARG_SCRATCHPAD: dnnl.memory(pd.scratchpad_desc(), cpu_engine)})
    # no scratchpad at all: zero desc, not an argument even in user mode
    none = toy_pd(cpu_engine, src, bias, dst, attr, scratch_bytes=0)
    assert none.scratchpad_desc().is_zero()
    assert dnnl.ARG_SCRATCHPAD not in none.arg_specs()
    with pytest.raises(dnnl.invalid_arguments, match="mode"):
        attr.set_scratchpad_mode(5)


def test_execute_validation(cpu_engine, mds):
    src, bias, dst = mds
    p = toy(toy_pd(cpu_engine, src, bias, dst, scratch_bytes=0))
    assert p.created and p.get_primitive_desc().impl_info_str() == "toy:numpy"
    s = dnnl.stream(cpu_engine)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), 0.5, np.float32)
    out = dnnl.memory(dst, cpu_engine, np.full((2, 3), 9, np.float32))
    good = {dnnl.ARG_SRC: dnnl.memory(src, cpu_engine, x), dnnl.ARG_DST: out,
            dnnl.ARG_WORKSPACE: dnnl.memory(md_([7], dt.f32, tag.a), cpu_engine)}
    bad_cases = [
        ({k: v for k, v in good.items() if k != dnnl.ARG_WORKSPACE},
         "missing argument ARG_WORKSPACE"),
        ({**good, dnnl.ARG_BIAS: dnnl.memory(src, cpu_engine, b)},
         r"argument ARG_BIAS has desc .*ab.*expects.*ba"),
        ({**good, dnnl.ARG_WEIGHTS_ITER: good[dnnl.ARG_SRC]},
         "unexpected argument ARG_WEIGHTS_ITER"),
        ({**good, 99999: good[dnnl.ARG_SRC]}, r"unexpected argument ARG\(99999\)"),
        ({**good, dnnl.ARG_SRC: x}, "ARG_SRC must be a pydnnl.memory"),
        ({**good, dnnl.ARG_SRC: dnnl.memory(md_([2, 3], dt.f16, tag.ab), cpu_engine)},
         "ARG_SRC has desc .*f16"),
    ]
    for args, match in bad_cases:
        with pytest.raises(dnnl.invalid_arguments, match=match):
            p.execute(s, args)
        assert np.all(out.to_numpy() == 9), match
    with pytest.raises(dnnl.invalid_arguments, match="stream"):
        p.execute(cpu_engine, good)
    with pytest.raises(dnnl.invalid_arguments, match="dict"):
        p.execute(s, list(good.values()))
    assert np.all(out.to_numpy() == 9)
    # the optional bias may be left out or given
    p.execute(s, good)
    s.wait()
    assert np.array_equal(out.to_numpy(), x)
    p.execute(s, {**good, dnnl.ARG_BIAS: dnnl.memory(bias, cpu_engine, b)})
    s.wait()
    assert np.array_equal(out.to_numpy(), x + b)


def test_execute_other_engine(cpu_engine, mds):
    others = [dnnl.engine(dnnl.engine.kind.cpu, i)
              for i in range(dnnl.engine.get_count(dnnl.engine.kind.cpu))]
    others = [e for e in others if e != cpu_engine]
    if not others:
        pytest.skip("only one CPU device present")
    other = others[0]
    src, bias, dst = mds
    p = toy(toy_pd(cpu_engine, src, bias, dst, scratch_bytes=0))
    out = dnnl.memory(dst, cpu_engine, np.full((2, 3), 9, np.float32))
    args = {dnnl.ARG_SRC: dnnl.memory(src, other, np.ones((2, 3), np.float32)), dnnl.ARG_DST: out,
            dnnl.ARG_WORKSPACE: dnnl.memory(md_([7], dt.f32, tag.a), cpu_engine)}
    with pytest.raises(dnnl.invalid_arguments, match="ARG_SRC lives on"):
        p.execute(dnnl.stream(cpu_engine), args)
    with pytest.raises(dnnl.invalid_arguments, match="stream is on"):
        p.execute(dnnl.stream(other), {**args, dnnl.ARG_SRC: dnnl.memory(src, cpu_engine)})
    assert np.all(out.to_numpy() == 9)


def test_bad_construction(cpu_engine, mds):
    src, bias, dst = mds
    with pytest.raises(dnnl.invalid_arguments, match="engine"):
        toy_pd("cpu", src, bias, dst)
    with pytest.raises(dnnl.invalid_arguments, match="attr"):
        toy_pd(cpu_engine, src, bias, dst, attr={})
    with pytest.raises(dnnl.invalid_arguments, match="primitive_desc"):
        toy(object())


def test_reorder_pd_queries(cpu_engine):
    a, b = md_([2, 3, 4], dt.f32, tag.abc), md_([2, 3, 4], dt.s8, tag.cab)
    attr = dnnl.primitive_attr()
    attr.set_scales_mask(dnnl.ARG_TO, 1 << 2)
    attr.set_zero_points_mask(dnnl.ARG_TO, 0)
    pd = dnnl.reorder.primitive_desc(cpu_engine, a, cpu_engine, b, attr)
    assert pd.src_desc() == a and pd.dst_desc() == b
    assert pd.src_desc(1).is_zero() and pd.dst_desc(1).is_zero()
    assert pd.query_md(q.src_md) == a and pd.query_md(q.dst_md) == b
    assert pd.weights_desc().is_zero() and pd.workspace_desc().is_zero()
    assert pd.scratchpad_desc().is_zero() and pd.query_md(q.scratchpad_md).is_zero()
    assert pd.query_md(q.exec_arg_md, dnnl.ARG_FROM) == a
    assert pd.query_md(q.exec_arg_md, dnnl.ARG_ATTR_SCALES | dnnl.ARG_TO) == md_([4], dt.f32, tag.a)
    assert (pd.query_md(q.exec_arg_md, dnnl.ARG_ATTR_ZERO_POINTS | dnnl.ARG_TO)
            == md_([1], dt.s32, tag.a))
    assert pd.query_md(q.exec_arg_md, dnnl.ARG_ATTR_SCALES | dnnl.ARG_FROM).is_zero()
    assert "reorder" in pd.impl_info_str()
    assert pd.get_primitive_attr() is attr
