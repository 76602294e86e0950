"""ARG_* numbers and enumerations carry oneDNN's numeric values.

The expected numbers below are copied from oneDNN's headers (``dnnl_types.h``,
``dnnl_common_types.h``), not from pydnnl.
"""
from __future__ import annotations

import pytest

import pydnnl as dnnl

# name -> value, from include/oneapi/dnnl/dnnl_types.h
ARGS = {
    "ARG_UNDEF": 0,
    "ARG_SRC_0": 1, "ARG_SRC": 1, "ARG_SRC_LAYER": 1, "ARG_FROM": 1,
    "ARG_SRC_1": 2, "ARG_SRC_ITER": 2,
    "ARG_SRC_2": 3, "ARG_SRC_ITER_C": 3,
    "ARG_SRC_3": 4, "ARG_AUGRU_ATTENTION": 4,
    "ARG_DST_0": 17, "ARG_DST": 17, "ARG_DST_LAYER": 17, "ARG_TO": 17,
    "ARG_DST_1": 18, "ARG_DST_ITER": 18,
    "ARG_DST_2": 19, "ARG_DST_ITER_C": 19,
    "ARG_WEIGHTS_0": 33, "ARG_WEIGHTS": 33, "ARG_WEIGHTS_LAYER": 33,
    "ARG_WEIGHTS_1": 34, "ARG_WEIGHTS_ITER": 34,
    "ARG_WEIGHTS_2": 35, "ARG_WEIGHTS_PEEPHOLE": 35,
    "ARG_WEIGHTS_3": 36, "ARG_WEIGHTS_PROJECTION": 36,
    "ARG_BIAS": 41, "ARG_REDUCE": 42,
    "ARG_MEAN": 49, "ARG_VARIANCE": 50, "ARG_SCALE": 51, "ARG_SHIFT": 52,
    "ARG_WORKSPACE": 64, "ARG_SCRATCHPAD": 80,
    "ARG_DIFF_SRC_0": 129, "ARG_DIFF_SRC": 129, "ARG_DIFF_SRC_LAYER": 129,
    "ARG_DIFF_SRC_1": 130, "ARG_DIFF_SRC_ITER": 130,
    "ARG_DIFF_SRC_2": 131, "ARG_DIFF_SRC_ITER_C": 131,
    "ARG_DIFF_SRC_3": 132, "ARG_DIFF_AUGRU_ATTENTION": 132,
    "ARG_DIFF_DST_0": 145, "ARG_DIFF_DST": 145, "ARG_DIFF_DST_LAYER": 145,
    "ARG_DIFF_DST_1": 146, "ARG_DIFF_DST_ITER": 146,
    "ARG_DIFF_DST_2": 147, "ARG_DIFF_DST_ITER_C": 147,
    "ARG_DIFF_WEIGHTS_0": 161, "ARG_DIFF_WEIGHTS": 161, "ARG_DIFF_WEIGHTS_LAYER": 161,
    "ARG_DIFF_WEIGHTS_1": 162, "ARG_DIFF_WEIGHTS_ITER": 162,
    "ARG_DIFF_WEIGHTS_2": 163, "ARG_DIFF_WEIGHTS_PEEPHOLE": 163,
    "ARG_DIFF_WEIGHTS_3": 164, "ARG_DIFF_WEIGHTS_PROJECTION": 164,
    "ARG_DIFF_BIAS": 169, "ARG_DIFF_SCALE": 255, "ARG_DIFF_SHIFT": 256,
    "ARG_ATTR_DROPOUT_OFFSET": 507, "ARG_ATTR_ROUNDING_SEED": 508,
    "ARG_ATTR_DROPOUT_MASK": 509, "ARG_ATTR_DROPOUT_PROBABILITY": 510,
    "ARG_ATTR_DROPOUT_SEED": 511, "ARG_ATTR_OUTPUT_SCALES": 513,
    "ARG_MULTIPLE_SRC": 1024, "ARG_MULTIPLE_DST": 2048,
    "ARG_ATTR_SCALES": 4096, "ARG_ATTR_ZERO_POINTS": 8192,
    "ARG_ATTR_POST_OP_DW": 16384, "ARG_ATTR_MULTIPLE_POST_OP_BASE": 32768,
}


@pytest.mark.parametrize("name", sorted(ARGS))
def test_arg_value_and_dnnl_alias(name):
    assert getattr(dnnl, name) == ARGS[name]
    assert getattr(dnnl, "DNNL_" + name) == ARGS[name]


def test_diff_args_are_128_plus_forward():
    forward = [n for n in ARGS if n.startswith(("ARG_SRC", "ARG_DST", "ARG_WEIGHTS", "ARG_BIAS"))]
    forward.append("ARG_AUGRU_ATTENTION")
    checked = 0
    for n in forward:
        diff = "ARG_DIFF_" + n[len("ARG_"):]
        assert hasattr(dnnl, diff), diff
        assert getattr(dnnl, diff) == 128 + getattr(dnnl, n), diff
        checked += 1
    assert checked >= 25


def test_post_op_arg_macro():
    assert dnnl.ARG_ATTR_MULTIPLE_POST_OP(0) == 32768
    assert dnnl.ARG_ATTR_MULTIPLE_POST_OP(2) == 3 * 32768
    assert dnnl.DNNL_ARG_ATTR_SCALES | dnnl.DNNL_ARG_FROM == 4097


def test_arg_name_readable():
    from pydnnl.constants import arg_name

    assert arg_name(dnnl.ARG_SRC) == "ARG_SRC"
    assert arg_name(dnnl.ARG_WEIGHTS_ITER) == "ARG_WEIGHTS_ITER"
    assert arg_name(dnnl.ARG_ATTR_SCALES | dnnl.ARG_DST) == "ARG_ATTR_SCALES|ARG_DST"
    assert arg_name(99999) == "ARG(99999)"


def test_prop_kind_values():
    pk = dnnl.prop_kind
    expected = {"undef": 0, "forward_training": 64, "forward": 64, "forward_inference": 96,
                "backward": 128, "backward_data": 160, "backward_weights": 192,
                "backward_bias": 193}
    for n, v in expected.items():
        assert getattr(pk, n) == v, n


def test_algorithm_values():
    # dnnl_alg_kind_t, oneDNN v3 (eltwise kinds are consecutive from 0x20)
    expected = {"undef": 0, "convolution_direct": 0x1, "convolution_winograd": 0x2,
                "convolution_auto": 0x3, "deconvolution_direct": 0xA,
                "deconvolution_winograd": 0xB, "vanilla_rnn": 0x1FFF, "vanilla_lstm": 0x2FFF,
                "vanilla_gru": 0x3FFF, "lbr_gru": 0x4FFF, "vanilla_augru": 0x5FFF,
                "lbr_augru": 0x6FFF}
    eltwise = ["relu", "tanh", "elu", "square", "abs", "sqrt", "linear", "soft_relu",
               "hardsigmoid", "logistic", "exp", "gelu_tanh", "swish", "log", "clip", "clip_v2",
               "pow", "gelu_erf", "round"]
    for i, n in enumerate(eltwise):
        expected["eltwise_" + n] = 0x20 + i
    for n, v in expected.items():
        assert getattr(dnnl.algorithm, n) == v, n


def test_rnn_direction_and_flags():
    d = dnnl.rnn_direction
    assert (d.undef, d.unidirectional_left2right, d.unidirectional_right2left,
            d.bidirectional_concat, d.bidirectional_sum) == (0, 1, 2, 3, 4)
    assert d.unidirectional == 1
    assert dnnl.rnn_flags.undef == 0
    assert dnnl.rnn_flags.diff_weights_overwrite == 1


def test_query_and_scratchpad_mode_values():
    q = dnnl.query
    assert (q.some_md, q.src_md, q.diff_src_md, q.weights_md, q.diff_weights_md, q.dst_md,
            q.diff_dst_md, q.workspace_md, q.scratchpad_md, q.exec_arg_md) == (
        128, 129, 130, 131, 132, 133, 134, 135, 136, 255)
    assert dnnl.scratchpad_mode.library == 0
    assert dnnl.scratchpad_mode.user == 1


def test_data_type_engine_kind_stream_flag_values():
    dt = dnnl.memory.data_type
    assert ((dt.undef, dt.f16, dt.bf16, dt.f32, dt.s32, dt.s8, dt.u8, dt.f64)
            == (0, 1, 2, 3, 4, 5, 6, 7))
    k = dnnl.engine.kind
    assert (k.any, k.cpu, k.gpu) == (0, 1, 2)
    f = dnnl.stream.flags
    assert (f.in_order, f.out_of_order, f.default_flags, f.profiling) == (1, 2, 1, 4)
