"""oneDNN's enumerations and execution-argument numbers, with oneDNN's numeric values (v3 API)."""
from __future__ import annotations

import enum


class prop_kind(enum.IntEnum):
    """Propagation kind (``dnnl_prop_kind_t``)."""

    undef = 0
    forward_training = 64
    forward = 64
    forward_inference = 96
    forward_scoring = 96
    backward = 128
    backward_data = 160
    backward_weights = 192
    backward_bias = 193


class algorithm(enum.IntEnum):
    """Algorithm kinds (``dnnl_alg_kind_t``) used by the primitives pydnnl implements."""

    undef = 0
    convolution_direct = 0x1
    convolution_winograd = 0x2
    convolution_auto = 0x3
    deconvolution_direct = 0xA
    deconvolution_winograd = 0xB
    eltwise_relu = 0x20
    eltwise_tanh = 0x21
    eltwise_elu = 0x22
    eltwise_square = 0x23
    eltwise_abs = 0x24
    eltwise_sqrt = 0x25
    eltwise_linear = 0x26
    eltwise_soft_relu = 0x27
    eltwise_hardsigmoid = 0x28
    eltwise_logistic = 0x29
    eltwise_exp = 0x2A
    eltwise_gelu_tanh = 0x2B
    eltwise_swish = 0x2C
    eltwise_log = 0x2D
    eltwise_clip = 0x2E
    eltwise_clip_v2 = 0x2F
    eltwise_pow = 0x30
    eltwise_gelu_erf = 0x31
    eltwise_round = 0x32
    eltwise_mish = 0x33
    eltwise_hardswish = 0x34
    eltwise_relu_use_dst_for_bwd = 0x100
    eltwise_tanh_use_dst_for_bwd = 0x101
    eltwise_elu_use_dst_for_bwd = 0x102
    eltwise_sqrt_use_dst_for_bwd = 0x103
    eltwise_logistic_use_dst_for_bwd = 0x104
    eltwise_exp_use_dst_for_bwd = 0x105
    eltwise_clip_v2_use_dst_for_bwd = 0x106
    pooling_max = 0x1FF
    pooling_avg_include_padding = 0x2FF
    pooling_avg_exclude_padding = 0x3FF
    vanilla_rnn = 0x1FFF
    vanilla_lstm = 0x2FFF
    vanilla_gru = 0x3FFF
    lbr_gru = 0x4FFF
    vanilla_augru = 0x5FFF
    lbr_augru = 0x6FFF
    binary_add = 0x1FFF0
    binary_mul = 0x1FFF1
    binary_max = 0x1FFF2
    binary_min = 0x1FFF3
    binary_div = 0x1FFF4
    binary_sub = 0x1FFF5
    binary_ge = 0x1FFF6
    binary_gt = 0x1FFF7
    binary_le = 0x1FFF8
    binary_lt = 0x1FFF9
    binary_eq = 0x1FFFA
    binary_ne = 0x1FFFB
    binary_select = 0x1FFFC  # dst = src2 ? src0 : src1 (oneDNN 3.7: src2 is s8)
    reduction_max = 0x2FFF2
    reduction_min = 0x2FFF3
    reduction_sum = 0x2FFF4
    reduction_mul = 0x2FFF5
    reduction_mean = 0x2FFF6
    reduction_norm_lp_max = 0x2FFF7
    reduction_norm_lp_sum = 0x2FFF8
    reduction_norm_lp_power_p_max = 0x2FFF9
    reduction_norm_lp_power_p_sum = 0x2FFFA
    softmax_accurate = 0x30000
    softmax_log = 0x30001


class rnn_direction(enum.IntEnum):
    """RNN direction (``dnnl_rnn_direction_t``)."""

    undef = 0
    unidirectional_left2right = 1
    unidirectional_right2left = 2
    bidirectional_concat = 3
    bidirectional_sum = 4
    unidirectional = 1


class rnn_flags(enum.IntFlag):
    """RNN flags (``dnnl_rnn_flags_t``)."""

    undef = 0x0
    diff_weights_overwrite = 0x1


class normalization_flags(enum.IntFlag):
    """Flags of the batch and layer normalization primitives (``dnnl_normalization_flags_t``)."""

    none = 0x0
    use_global_stats = 0x1
    use_scale = 0x2
    use_shift = 0x4
    fuse_norm_relu = 0x8
    fuse_norm_add_relu = 0x10


class fpmath_mode(enum.IntEnum):
    """Floating-point math a primitive may use in place of f32 (``dnnl_fpmath_mode_t``):
    ``strict`` computes in f32; ``tf32`` (and ``any``) let f32 products run on TF32 tensor
    cores where the device has them; ``bf16``/``f16`` allow those types (pydnnl has no such
    path yet and computes them as ``strict``)."""

    strict = 0
    bf16 = 1
    f16 = 2
    any = 3
    tf32 = 4


class scratchpad_mode(enum.IntEnum):
    """Who owns the scratchpad (``dnnl_scratchpad_mode_t``)."""

    library = 0
    user = 1


class query(enum.IntEnum):
    """Primitive-descriptor queries used with ``query_md`` (``dnnl_query_t``)."""

    undef = 0
    some_md = 128
    src_md = 129
    diff_src_md = 130
    weights_md = 131
    diff_weights_md = 132
    dst_md = 133
    diff_dst_md = 134
    workspace_md = 135
    scratchpad_md = 136
    exec_arg_md = 255


# ----------------------------------------------------------------------------------------------
# Execution-argument numbers (``DNNL_ARG_*``), oneDNN's values.
ARG_UNDEF = 0
ARG_SRC_0 = 1
ARG_SRC = ARG_SRC_0
ARG_SRC_LAYER = ARG_SRC_0
ARG_FROM = ARG_SRC_0
ARG_SRC_1 = 2
ARG_SRC_ITER = ARG_SRC_1
ARG_SRC_2 = 3
ARG_SRC_ITER_C = ARG_SRC_2
ARG_SRC_3 = 4
ARG_AUGRU_ATTENTION = ARG_SRC_3
ARG_DST_0 = 17
ARG_DST = ARG_DST_0
ARG_DST_LAYER = ARG_DST_0
ARG_TO = ARG_DST_0
ARG_DST_1 = 18
ARG_DST_ITER = ARG_DST_1
ARG_DST_2 = 19
ARG_DST_ITER_C = ARG_DST_2
ARG_WEIGHTS_0 = 33
ARG_WEIGHTS = ARG_WEIGHTS_0
ARG_WEIGHTS_LAYER = ARG_WEIGHTS_0
ARG_WEIGHTS_1 = 34
ARG_WEIGHTS_ITER = ARG_WEIGHTS_1
ARG_WEIGHTS_2 = 35
ARG_WEIGHTS_PEEPHOLE = ARG_WEIGHTS_2
ARG_WEIGHTS_3 = 36
ARG_WEIGHTS_PROJECTION = ARG_WEIGHTS_3
ARG_BIAS = 41
ARG_REDUCE = 42
ARG_MEAN = 49
ARG_VARIANCE = 50
ARG_SCALE = 51
ARG_SHIFT = 52
ARG_WORKSPACE = 64
ARG_SCRATCHPAD = 80
ARG_DIFF_SRC_0 = 129
ARG_DIFF_SRC = ARG_DIFF_SRC_0
ARG_DIFF_SRC_LAYER = ARG_DIFF_SRC_0
ARG_DIFF_SRC_1 = 130
ARG_DIFF_SRC_ITER = ARG_DIFF_SRC_1
ARG_DIFF_SRC_2 = 131
ARG_DIFF_SRC_ITER_C = ARG_DIFF_SRC_2
ARG_DIFF_SRC_3 = 132
ARG_DIFF_AUGRU_ATTENTION = ARG_DIFF_SRC_3
ARG_DIFF_DST_0 = 145
ARG_DIFF_DST = ARG_DIFF_DST_0
ARG_DIFF_DST_LAYER = ARG_DIFF_DST_0
ARG_DIFF_DST_1 = 146
ARG_DIFF_DST_ITER = ARG_DIFF_DST_1
ARG_DIFF_DST_2 = 147
ARG_DIFF_DST_ITER_C = ARG_DIFF_DST_2
ARG_DIFF_WEIGHTS_0 = 161
ARG_DIFF_WEIGHTS = ARG_DIFF_WEIGHTS_0
ARG_DIFF_WEIGHTS_LAYER = ARG_DIFF_WEIGHTS_0
ARG_DIFF_WEIGHTS_1 = 162
ARG_DIFF_WEIGHTS_ITER = ARG_DIFF_WEIGHTS_1
ARG_DIFF_WEIGHTS_2 = 163
ARG_DIFF_WEIGHTS_PEEPHOLE = ARG_DIFF_WEIGHTS_2
ARG_DIFF_WEIGHTS_3 = 164
ARG_DIFF_WEIGHTS_PROJECTION = ARG_DIFF_WEIGHTS_3
ARG_DIFF_BIAS = 169
ARG_DIFF_SCALE = 255
ARG_DIFF_SHIFT = 256
ARG_ATTR_DROPOUT_OFFSET = 507
ARG_ATTR_ROUNDING_SEED = 508
ARG_ATTR_DROPOUT_MASK = 509
ARG_ATTR_DROPOUT_PROBABILITY = 510
ARG_ATTR_DROPOUT_SEED = 511
ARG_ATTR_OUTPUT_SCALES = 513
ARG_MULTIPLE_SRC = 1024
ARG_MULTIPLE_DST = 2048
ARG_ATTR_SCALES = 4096
ARG_ATTR_ZERO_POINTS = 8192
ARG_ATTR_POST_OP_DW = 16384
ARG_ATTR_MULTIPLE_POST_OP_BASE = 32768


def ARG_ATTR_MULTIPLE_POST_OP(idx: int) -> int:
    """Argument number of the ``idx``-th post-op's extra input (oneDNN's macro)."""
    return ARG_ATTR_MULTIPLE_POST_OP_BASE * (idx + 1)


def _arg_names() -> dict[int, str]:
    names: dict[int, str] = {}
    for k, v in globals().items():
        if k.startswith("ARG_") and isinstance(v, int) and v not in names:
            names[v] = k
    # prefer the RNN-neutral names users see most
    for k in ("ARG_SRC", "ARG_DST", "ARG_WEIGHTS", "ARG_DIFF_SRC", "ARG_DIFF_DST",
              "ARG_DIFF_WEIGHTS", "ARG_SRC_ITER", "ARG_SRC_ITER_C", "ARG_DST_ITER",
              "ARG_DST_ITER_C", "ARG_WEIGHTS_ITER", "ARG_WEIGHTS_PEEPHOLE",
              "ARG_WEIGHTS_PROJECTION", "ARG_AUGRU_ATTENTION", "ARG_DIFF_SRC_ITER",
              "ARG_DIFF_SRC_ITER_C", "ARG_DIFF_DST_ITER", "ARG_DIFF_DST_ITER_C",
              "ARG_DIFF_WEIGHTS_ITER", "ARG_DIFF_WEIGHTS_PEEPHOLE",
              "ARG_DIFF_WEIGHTS_PROJECTION", "ARG_DIFF_AUGRU_ATTENTION"):
        names[globals()[k]] = k
    return names


_ARG_NAMES: dict[int, str] = {}


def arg_name(arg: int) -> str:
    """Readable name of an execution-argument number, e.g. ``arg_name(1) == 'ARG_SRC'``."""
    if not _ARG_NAMES:
        _ARG_NAMES.update(_arg_names())
    if arg in _ARG_NAMES:
        return _ARG_NAMES[arg]
    for flag, name in ((ARG_ATTR_SCALES, "ARG_ATTR_SCALES"),
                       (ARG_ATTR_ZERO_POINTS, "ARG_ATTR_ZERO_POINTS")):
        if isinstance(arg, int) and arg & flag and (arg & ~flag) in _ARG_NAMES:
            return f"{name}|{_ARG_NAMES[arg & ~flag]}"
    base = ARG_ATTR_MULTIPLE_POST_OP_BASE
    if isinstance(arg, int) and arg >= base and arg % base in _ARG_NAMES:
        rest = arg % base  # a binary operand's ARG_SRC_1 shares its number with ARG_SRC_ITER
        return (f"ARG_ATTR_MULTIPLE_POST_OP({arg // base - 1})|"
                f"{'ARG_SRC_1' if rest == ARG_SRC_1 else _ARG_NAMES[rest]}")
    return f"ARG({arg})"


def export_dnnl_aliases(namespace: dict) -> None:
    """Add ``DNNL_ARG_*`` aliases of every ``ARG_*`` name to ``namespace``."""
    for k, v in list(globals().items()):
        if k.startswith("ARG_"):
            namespace["DNNL_" + k] = v


# pydnnl extensions, no oneDNN counterpart: the optimizer-update primitives (sgd_update: state 0
# is the momentum buffer; adam_update: states 0 and 1 are m and v, the step a 1-element f32 t)
ARG_OPTIMIZER_STATE_0 = 769
ARG_OPTIMIZER_STATE_1 = 770
ARG_OPTIMIZER_STEP = 771
