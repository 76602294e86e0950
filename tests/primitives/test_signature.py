"""The one signature matcher (``pydnnl.primitives.signature.bind``) against hand-written
expectations, and every public primitive written as a class statement."""
from __future__ import annotations

import inspect

import pytest

import pydnnl as dnnl
from pydnnl.primitives.signature import Signature, bind

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


PUBLIC = ["vanilla_rnn_forward", "lstm_forward", "gru_forward", "lbr_gru_forward",
          "augru_forward", "lbr_augru_forward", "vanilla_rnn_backward", "lstm_backward",
          "gru_backward", "lbr_gru_backward", "augru_backward", "lbr_augru_backward",
          "convolution_forward", "convolution_backward_data", "convolution_backward_weights",
          "deconvolution_forward", "deconvolution_backward_data",
          "deconvolution_backward_weights", "reorder", "matmul"]


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
