"""The strided reorder program (every size and stride an argument) against the per-shape
loopy kernel, bit for bit, on every CPU device: layouts, conversions, scales and zero points
with their masks, RNN quantization, beta; one program per class across shapes."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels.reorder import ReorderProblem, build_reorder_loopy, layout_of
from pydnnl.kernels.reorder_strided import build_strided_reorder, strided_form
from pydnnl.kernels.source import source_from_loopy
from pydnnl.memory.data_types import data_type as D
from pydnnl.runtime.heuristics.reorder import STRIDED_MAX_ELEMS, strided_reorder
from pydnnl.runtime.kernel_cache import get_kernel

MD, tag = dnnl.memory.desc, dnnl.memory.format_tag
CPUS = [dnnl.engine(dnnl.engine.kind.cpu, i)
        for i in range(dnnl.engine.get_count(dnnl.engine.kind.cpu))]
_FLOATS = (D.f32, D.f16, D.bf16)

CASES = [
    ([3, 4, 5], D.f32, D.f32, tag.abc, tag.cba, {}),
    ([2, 3, 4, 5], D.f32, D.bf16, tag.abcd, tag.acdb, {}),
    ([2, 3, 4], D.f32, D.s8, tag.abc, tag.acb, {"dst_scale_mask": 2, "dst_zp_mask": 0}),
    ([2, 3, 4], D.s8, D.f32, tag.abc, tag.cab, {"src_scale_mask": 5, "src_zp_mask": 0}),
    ([4, 3, 6], D.f32, D.u8, tag.abc, tag.abc, {"rnn_data": True}),
    ([1, 1, 4, 3, 6], D.f32, D.s8, tag.abcde, tag.abcde, {"rnn_weights_mask": 0b11000}),
    ([70, 3], D.f32, D.f16, tag.ab, tag.ba, {}),
    ([5, 7], D.f32, D.f32, tag.ab, tag.ba, {"beta": 0.5}),
]
_OPERANDS = {"src_zp": "src_zp_mask", "src_scale": "src_scale_mask",
             "dst_scale": "dst_scale_mask", "dst_zp": "dst_zp_mask",
             "rnn_wscale": "rnn_weights_mask"}


def _problem(dims, sdt, ddt, stag, dtag, extra):
    smd, dmd = MD(dims, sdt, stag), MD(dims, ddt, dtag)
    return smd, dmd, ReorderProblem(
        dims=tuple(dims), src_dt=sdt, dst_dt=ddt, src_layout=layout_of(smd),
        dst_layout=layout_of(dmd), src_nelems=smd.nelems_physical(),
        dst_nelems=dmd.nelems_physical(), **extra)


@pytest.mark.parametrize("eng", CPUS, ids=[e.info.platform.split()[0] for e in CPUS])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[1].name}-{c[2].name}-{len(c[0])}d"
                         + "".join(f"-{k}" for k in c[5]))
def test_strided_program_equals_the_loopy_kernel(eng, case):
    import pyopencl as cl

    dims, sdt, ddt, stag, dtag, extra = case
    smd, dmd, p = _problem(*case)
    s = dnnl.stream(eng)
    rng = np.random.default_rng(len(dims))
    x = (rng.standard_normal(dims) * 20).astype(np.float32)
    src = dnnl.memory(smd, eng, x if sdt in _FLOATS else np.clip(x, -100, 100).astype(np.int8))
    init = rng.standard_normal(dims).astype(np.float32)
    ops = {}
    for k, field in _OPERANDS.items():
        m = extra.get(field)
        if m is None:
            continue
        n = int(np.prod([dims[d] for d in range(len(dims)) if m >> d & 1]))
        arr = rng.integers(-3, 3, n).astype(np.int32) if k.endswith("zp") \
            else (2.0 ** rng.integers(-2, 3, n)).astype(np.float32)
        ops[k] = cl.Buffer(eng.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                           hostbuf=arr)
    key, sizes = strided_form(p)
    outs = []
    for kind in ("loopy", "strided"):
        start = init if ddt in _FLOATS else init.astype(np.int8).astype(ddt.storage_dtype)
        dst = dnnl.memory(dmd, eng, start)
        vals = {"src": src.buffer, "dst": dst.buffer, **ops,
                "rnn_scale": np.float32(4.0), "rnn_shift": np.float32(64.0)}
        if kind == "loopy":
            kern = get_kernel(eng, "reorder", p,
                              lambda: source_from_loopy(build_reorder_loopy(p)))
        else:
            kern = get_kernel(eng, "reorder_strided", key, lambda: build_strided_reorder(key))
            vals.update({k: np.int64(v) for k, v in sizes.items()})
        kern(s, *[vals[n] for n in kern.src.arg_names])
        s.wait()
        outs.append(dst.read_raw().view(np.uint8).copy())
    np.testing.assert_array_equal(outs[1], outs[0])


def test_one_program_per_class_and_the_rule():
    """Shapes of one class share the key (sizes, strides, offsets and masks' positions are
    arguments); rank (dims of extent 1 left out), types, operands, unit innermost strides
    and 64-bit indices are not;
    blocked layouts have no strided form; the rule takes up to STRIDED_MAX_ELEMS."""
    keys = {strided_form(_problem([t, n, c], D.f32, D.s8, tag.abc, tag.acb,
                                  {"dst_scale_mask": 4})[2])[0]
            for t, n, c in ((2, 3, 4), (5, 7, 9), (3, 8, 16))}
    assert len(keys) == 1
    plain = strided_form(_problem([2, 3, 4], D.f32, D.f32, tag.abc, tag.abc, {})[2])[0]
    assert plain.unit == (True, True) and plain not in keys
    assert strided_form(_problem([2, 16, 3, 3], D.f32, D.f32, tag.nchw, tag.nChw8c, {})[2]) \
        is None
    info = CPUS[0].info
    assert strided_reorder(info, STRIDED_MAX_ELEMS)
    assert not strided_reorder(info, STRIDED_MAX_ELEMS + 1) and not strided_reorder(info, 0)
