"""The one signature matcher (``pydnnl.primitives.signature.bind``) against hand-written
expectations, and every public primitive written as a class statement."""
from __future__ import annotations

import inspect

import pytest

import pydnnl as dnnl
from pydnnl.primitives.signature import BOOL, DIMS, Signature, bind

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
SIG = Signature("demo.primitive_desc", head=("engine",),
                forms=(("src_desc", "weights_desc", "dst_desc"),
                       ("src_desc", "weights_desc", "bias_desc", "dst_desc")),
                tail=("attr",), optional=frozenset({"bias_desc"}),
                aliases={"aengine": "engine"})
A, B, C, D = (dnnl.memory.desc([2, 2], dt.f32, tag.ab) for _ in range(4))


def test_positional_forms_choose_by_count():
    assert bind(SIG, ("e", A, B, C), {}) == {"engine": "e", "src_desc": A, "weights_desc": B,
                                             "dst_desc": C, "attr": None}
    got = bind(SIG, ("e", A, B, D, C), {})
    assert got["bias_desc"] is D and got["dst_desc"] is C


def test_attr_positionally_or_by_keyword():
    attr = dnnl.primitive_attr()
    assert bind(SIG, ("e", A, B, C, attr), {})["attr"] is attr
    assert bind(SIG, ("e", A, B, C), {"attr": attr})["attr"] is attr
    got = bind(SIG, ("e", A, B, C, None), {})  # the 3-desc form with attr None
    assert got["dst_desc"] is C and got["attr"] is None and "bias_desc" not in got


def test_keywords_and_aliases():
    got = bind(SIG, (), {"aengine": "e", "src_desc": A, "weights_desc": B, "dst_desc": C})
    assert got["engine"] == "e" and got.get("bias_desc") is None  # optional left out
    got = bind(SIG, ("e",), {"src_desc": A, "weights_desc": B, "bias_desc": D, "dst_desc": C})
    assert got["bias_desc"] is D
    got = bind(SIG, ("e", A, B), {"dst_desc": C})  # positional prefix completed by keyword
    assert got["dst_desc"] is C


@pytest.mark.parametrize("args,kw,match", [
    (("e", A, B, C), {"src_desc": A}, "src_desc given twice"),
    (("e", A, B, C), {"sorce_desc": A}, "unknown keyword argument.*sorce_desc"),
    ((), {"src_desc": A}, "missing engine"),
    (("e",), {"src_desc": A, "weights_desc": B}, "missing dst_desc"),
    (("e", A), {}, "missing"),
    (("e", A, B, C, "x"), {}, "attr"),
    (("e", A, 3, C), {}, "memory.desc"),
])
def test_errors_name_the_argument(args, kw, match):
    with pytest.raises(dnnl.invalid_arguments, match=match):
        bind(SIG, args, kw)


# a conv-like signature: a run of descs, then a run of lists (dilates optional), then attr
CONV = Signature("conv.primitive_desc", head=("engine",),
                 forms=(("src_desc", "dst_desc", "strides", "dilates", "padding"),
                        ("src_desc", "dst_desc", "strides", "padding")),
                 tail=("attr",), optional=frozenset({"dilates"}), kinds={
                     "strides": DIMS, "dilates": DIMS, "padding": DIMS})


REORDER_LIKE = Signature("copy.primitive_desc", head=(),
                        forms=(("src", "dst"), ("src_engine", "src_md", "dst_engine", "dst_md")),
                        kinds={"src": BOOL})


@pytest.mark.parametrize("sig,args,kw,match", [
    (SIG, ("e", A, B, C, D, D), {}, r"expected memory descs src_desc, weights_desc, "
                                    r"\[bias_desc,\] dst_desc \(3 or 4 of them\), got 5"),
    (CONV, ("e", A, [1], [1]), {}, r"expected memory descs src_desc, dst_desc \(2 of them\), "
                                   r"got 1"),
    (CONV, ("e", A, B, [1]), {}, r"missing padding: expected lists strides, \[dilates,\] "
                                 r"padding \(2 or 3 of them\), got 1"),
    (CONV, ("e", A, B, [1], [1], [1], [1]), {}, r"expected lists .*got 4"),
    (CONV, ("e", A, "nchw", [1], [1]), {}, r"unexpected positional argument 'nchw' for "
                                           r"dst_desc \(expected a memory.desc or None\)"),
    (REORDER_LIKE, ("e", A, "e"), {"dst": B}, r"unknown keyword 'dst' for the positional form "
                                              r"\(src_engine, src_md, dst_engine, dst_md\)"),
    (REORDER_LIKE, ("e", A, "e"), {}, r"missing dst_md"),
    (SIG, (), {"engine": "e", "aengine": "e"}, r"engine given twice \(as engine and aengine\)"),
])
def test_count_and_kind_errors(sig, args, kw, match):
    with pytest.raises(dnnl.invalid_arguments, match=match):
        bind(sig, args, kw)


def test_runs_choose_the_form():
    got = bind(CONV, ("e", A, B, [1], [0], [2]), {})
    assert got["dilates"] == [0] and got["padding"] == [2]
    got = bind(CONV, ("e", A, B, [1], [2]), {})
    assert got.get("dilates") is None and got["padding"] == [2]
    assert bind(REORDER_LIKE, (True, False), {}) == {"src": True, "dst": False}
    got = bind(CONV, ("e", A, B, [1], [0]), {"padding": [2]})  # completed by keyword
    assert got["dilates"] == [0]


def test_longest_form_first_reads_a_trailing_none_as_a_desc():
    """lstm_forward: 10 values ending in None are the peephole form with dst_iter_c None,
    not the 9-desc form with attr None."""
    sig = dnnl.lstm_forward.primitive_desc.signature
    got = bind(sig, ("e", "p", "d") + (A,) * 9 + (None,), {})
    assert "weights_peephole_desc" in got and got["dst_iter_c_desc"] is None
    assert got["attr"] is None


def test_real_descriptors_report_counts(cpu_engine):
    md = dnnl.memory.desc([2, 2], dt.f32, tag.ab)
    with pytest.raises(dnnl.invalid_arguments, match=r"gru_forward.primitive_desc: expected "
                                                     r"memory descs .*\(7 of them\), got 8"):
        dnnl.gru_forward.primitive_desc(cpu_engine, dnnl.prop_kind.forward_inference,
                                        dnnl.rnn_direction.unidirectional_left2right, *[md] * 8)
    with pytest.raises(dnnl.invalid_arguments, match=r"hint_fwd_pd \(expected a primitive "
                                                     r"descriptor or None\)"):
        dnnl.convolution_backward_data.primitive_desc(
            cpu_engine, dnnl.algorithm.convolution_auto, md, md, md, [1, 1], [0, 0], [0, 0], 7)


PUBLIC = ["vanilla_rnn_forward", "lstm_forward", "gru_forward", "lbr_gru_forward",
          "augru_forward", "lbr_augru_forward", "vanilla_rnn_backward", "lstm_backward",
          "gru_backward", "lbr_gru_backward", "augru_backward", "lbr_augru_backward",
          "convolution_forward", "convolution_backward_data", "convolution_backward_weights",
          "deconvolution_forward", "deconvolution_backward_data",
          "deconvolution_backward_weights", "reorder", "matmul", "inner_product_forward",
          "inner_product_backward_data", "inner_product_backward_weights"]


@pytest.mark.parametrize("name", PUBLIC)
def test_public_primitives_are_class_statements(name):
    cls = getattr(dnnl, name)
    assert inspect.isclass(cls) and cls.__qualname__ == name
    assert cls.primitive_desc.__qualname__ == f"{name}.primitive_desc"
    assert inspect.getsource(cls).lstrip().startswith(f"class {name}(")
    sig = getattr(cls.primitive_desc, "signature", None)
    assert isinstance(sig, Signature), f"{name}.primitive_desc declares no Signature"


def test_primitive_checks_its_own_pd(cpu_engine):
    md = dnnl.memory.desc([2, 2], dt.f32, tag.ab)
    pd = dnnl.matmul.primitive_desc(cpu_engine, md, md, md)
    with pytest.raises(dnnl.invalid_arguments, match="matmul.primitive_desc"):
        dnnl.lstm_forward(pd)
