"""ONNX's own backend test suite (``onnx.backend.test``) on :class:`pydnnl.onnx.PydnnlBackend`:
the node tests of every operator the backend maps, on the CPU engine, compared with the
outputs stored in the onnx package at its tolerances.

``INCLUDE`` selects the tests by operator; the ``_expanded`` variants (an operator rewritten
as its function body of other operators: Where, CastLike, Shape, ...) are not selected.
``EXCLUDED`` lists every selected test that does not pass, with the reason; each one is run
too, and must still fail as stated (so the list cannot go stale).
"""
from __future__ import annotations

import re
import warnings

import pytest

import pydnnl

with warnings.catch_warnings():
    warnings.simplefilter("ignore")     # the case generators' own overflow warnings
    import onnx.backend.test

from pydnnl.onnx import PydnnlBackend  # noqa: E402

#: operator name stems of the node tests (test_<stem>[_<variant>])
OPERATORS = [
    "abs", "add", "averagepool", "basic_conv_with_padding", "basic_conv_without_padding",
    "batchnorm", "clip", "concat", "conv_with", "convtranspose", "div", "dropout",
    "training_dropout", "elu", "equal", "exp", "flatten", "gelu", "gemm", "globalaveragepool",
    "globalmaxpool", "greater", "greater_equal", "gru", "hardsigmoid", "hardswish", "identity",
    "layer_normalization", "leakyrelu", "less", "less_equal", "log", "logsoftmax", "lstm",
    "matmul", "max", "maxpool", "mean", "min", "mish", "mul", "neg", "pow", "reciprocal",
    "reduce_l1", "reduce_l2", "reduce_log_sum", "reduce_log_sum_exp", "reduce_max",
    "reduce_mean", "reduce_min", "reduce_prod", "reduce_sum", "reduce_sum_square", "relu",
    "reshape", "round", "rnn_seq_length", "selu", "sigmoid", "simple_rnn", "softmax",
    "softplus", "sqrt", "squeeze", "sub", "sum", "tanh", "transpose", "unsqueeze", "where",
    # shape arithmetic and data movement
    "constantofshape", "expand", r"gather(?!_elements)", "range", "shape", "slice",
]
INCLUDE = [
    r"^test_(%s)(?!.*_expanded(_ver\d+)?_cpu$)(_.*)?_cpu$"
    % "|".join(sorted(OPERATORS, key=len, reverse=True)),
    r"^test_constant_cpu$",
]

_INTEGER = ("integer data: the backend computes in float32 (pydnnl's compute primitives take "
            "f32/bf16/f16; integers only through reorder)")
_DOUBLE = "float64 data: the backend computes in float32"
_FLOAT16 = "float16 data: the backend's first version runs float32 graphs only"
_STRING = "string data: no pydnnl data type"
_BOOL = "bool input data: the backend computes in float32 (bool only as comparison output)"
_NOT_TENSOR = "optional / sequence types: the backend handles tensors only"
_EMPTY = "a tensor with a zero dim: a pydnnl memory holds at least one element"
_POW_TENSOR = ("Pow with a tensor exponent: oneDNN's eltwise_pow takes a scalar exponent and "
               "binary has no pow algorithm")
_ARGMAX = ("MaxPool's Indices output: oneDNN's max-pooling workspace holds the position in "
           "the window, not ONNX's flat index into the input")
_SLICE_NEG_STEPS = ("Slice with negative steps on a computed tensor: a pydnnl memory desc has "
                    "no negative strides")
_BN_TRAINING = ("BatchNormalization training_mode=1 (running mean/var outputs): the backend "
                "runs inference")
_DROPOUT_TRAINING = "Dropout in training mode with a non-zero ratio (random masks)"
_AVGPOOL_CEIL_INCLUDE_PAD = (
    "AveragePool count_include_pad=1 with ceil_mode=1: ONNX's divisor counts the explicit pads "
    "but not the window part past them that ceil_mode adds; oneDNN's "
    "pooling_avg_include_padding divides by the whole window")

#: selected tests that do not pass, and why (each must still fail: see test_excluded_case)
EXCLUDED: dict[str, str] = {
    **dict.fromkeys([
        "test_add_int16", "test_add_int8", "test_add_uint16", "test_add_uint32", "test_add_uint64",
        "test_add_uint8", "test_clip_default_int8_inbounds", "test_clip_default_int8_max",
        "test_clip_default_int8_min", "test_div_int16", "test_div_int32_trunc", "test_div_int8",
        "test_div_uint16", "test_div_uint32", "test_div_uint64", "test_div_uint8", "test_equal",
        "test_equal_bcast", "test_equal_int16", "test_equal_int8", "test_equal_uint16",
        "test_equal_uint32", "test_equal_uint64", "test_equal_uint8", "test_greater_equal_int16",
        "test_greater_equal_int8", "test_greater_equal_uint16", "test_greater_equal_uint32",
        "test_greater_equal_uint64", "test_greater_equal_uint8", "test_greater_int16",
        "test_greater_int8", "test_greater_uint16", "test_greater_uint32", "test_greater_uint64",
        "test_greater_uint8", "test_less_equal_int16", "test_less_equal_int8",
        "test_less_equal_uint16", "test_less_equal_uint32", "test_less_equal_uint64",
        "test_less_equal_uint8", "test_less_int16", "test_less_int8", "test_less_uint16",
        "test_less_uint32", "test_less_uint64", "test_less_uint8", "test_max_int16",
        "test_max_int32", "test_max_int64", "test_max_int8", "test_max_uint16", "test_max_uint32",
        "test_max_uint64", "test_max_uint8", "test_maxpool_2d_uint8", "test_min_int16",
        "test_min_int32", "test_min_int64", "test_min_int8", "test_min_uint16", "test_min_uint32",
        "test_min_uint64", "test_min_uint8", "test_mul_int16", "test_mul_int8", "test_mul_uint16",
        "test_mul_uint32", "test_mul_uint64", "test_mul_uint8", "test_sub_int16", "test_sub_int8",
        "test_sub_uint16", "test_sub_uint32", "test_sub_uint64", "test_sub_uint8",
        "test_where_long_example",
    ], _INTEGER),
    **dict.fromkeys([
        "test_max_float64", "test_min_float64",
        "test_reduce_log_sum_exp_default_axes_keepdims_example",
        "test_reduce_log_sum_exp_default_axes_keepdims_random",
        "test_reduce_log_sum_exp_do_not_keepdims_example",
        "test_reduce_log_sum_exp_do_not_keepdims_random",
        "test_reduce_log_sum_exp_keepdims_example", "test_reduce_log_sum_exp_keepdims_random",
        "test_reduce_log_sum_exp_negative_axes_keepdims_example",
        "test_reduce_log_sum_exp_negative_axes_keepdims_random",
    ], _DOUBLE),
    **dict.fromkeys(["test_max_float16", "test_min_float16"], _FLOAT16),
    **dict.fromkeys(["test_equal_string", "test_equal_string_broadcast"], _STRING),
    **dict.fromkeys([
        "test_reduce_max_bool_inputs", "test_reduce_max_empty_set_bool",
        "test_reduce_min_bool_inputs",
    ], _BOOL),
    **dict.fromkeys(["test_identity_opt", "test_identity_sequence"], _NOT_TENSOR),
    **dict.fromkeys([
        "test_reduce_l1_empty_set", "test_reduce_l2_empty_set", "test_reduce_log_sum_empty_set",
        "test_reduce_log_sum_exp_empty_set", "test_reduce_max_empty_set",
        "test_reduce_min_empty_set", "test_reduce_prod_empty_set", "test_reduce_sum_empty_set",
        "test_reduce_sum_empty_set_non_reduced_axis_zero", "test_reduce_sum_square_empty_set",
        "test_reshape_allowzero_reordered", "test_slice_start_out_of_bounds",
    ], _EMPTY),
    "test_slice_neg_steps": _SLICE_NEG_STEPS,
    **dict.fromkeys([
        "test_pow", "test_pow_bcast_array", "test_pow_example", "test_pow_types_float32_int32",
        "test_pow_types_float32_int64", "test_pow_types_float32_uint32",
        "test_pow_types_float32_uint64", "test_pow_types_int32_float32",
        "test_pow_types_int32_int32", "test_pow_types_int64_float32", "test_pow_types_int64_int64",
    ], _POW_TENSOR),
    **dict.fromkeys([
        "test_maxpool_with_argmax_2d_precomputed_pads",
        "test_maxpool_with_argmax_2d_precomputed_strides",
    ], _ARGMAX),
    **dict.fromkeys([
        "test_batchnorm_epsilon_training_mode", "test_batchnorm_example_training_mode",
    ], _BN_TRAINING),
    **dict.fromkeys([
        "test_training_dropout", "test_training_dropout_default",
        "test_training_dropout_default_mask", "test_training_dropout_mask",
    ], _DROPOUT_TRAINING),
    "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True":
        _AVGPOOL_CEIL_INCLUDE_PAD,
}

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _backend_test = onnx.backend.test.BackendTest(PydnnlBackend, __name__)
    for _p in INCLUDE:
        _backend_test.include(_p)
    for _name in EXCLUDED:
        _backend_test.exclude(f"^{_name}_cpu$")
    # in a dict: pytest would collect a module-level TestCase class (thousands of skips)
    _SUITE = {"node": _backend_test.test_cases["OnnxBackendNodeModelTest"]}

_SELECTED = sorted(m[:-4] for m in dir(_SUITE["node"])
                   if m.startswith("test_") and any(re.search(p, m) for p in INCLUDE))
PASSING = [n for n in _SELECTED if n not in EXCLUDED]


def _run(name: str) -> None:
    method, cls = f"{name}_cpu", _SUITE["node"]
    fn = getattr(cls, method)
    if getattr(fn, "__unittest_skip__", False):
        # onnx's skip wrapper of an excluded test: run the test it wraps
        fn = fn.__wrapped__
    fn(cls(method))


@pytest.mark.parametrize("name", PASSING)
def test_onnx_node(name):
    _run(name)


@pytest.mark.parametrize("name", sorted(EXCLUDED))
def test_excluded_case_fails_as_stated(name):
    """An excluded test still fails, by a pydnnl.error for unsupported features (whose message
    names the node) or by the stated numeric difference."""
    if EXCLUDED[name] is _AVGPOOL_CEIL_INCLUDE_PAD:
        with pytest.raises(AssertionError, match="Not equal to tolerance"):
            _run(name)
    else:
        with pytest.raises(pydnnl.error, match="node '|graph input"):
            _run(name)


def test_selection_counts():
    """Every excluded name is a selected test (no stale entries); the counts the docs give."""
    assert set(EXCLUDED) <= set(_SELECTED), sorted(set(EXCLUDED) - set(_SELECTED))
    assert len(PASSING) == 364 and len(EXCLUDED) == 130, (len(PASSING), len(EXCLUDED))
