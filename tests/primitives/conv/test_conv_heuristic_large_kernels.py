"""The rule that puts implicit GEMM ahead of im2col + GEMM for large kernels with few
output channels (DeepSpeech2's strided 41x11 and 21x11 layers, ResNet-50's 7x7 stem on CPUs),
and leaves 3x3 and 1x1 layers, wide layers and backward data with few taps per stride phase
(on GPUs every backward data) alone."""
from __future__ import annotations

from pydnnl.conv_shapes import validate_conv
from pydnnl.primitives.conv.solvers import heuristic_order


def _first(engine, kind, src, wei, strides, pad):
    g = validate_conv(src, wei, strides, [0] * len(strides), pad, pad)
    return heuristic_order(kind, g, engine)[0]


def test_large_strided_kernels_go_implicit_on_cpus(engine):
    if not engine.info.is_cpu:
        return
    ds2_conv1 = ((8, 1, 161, 200), (32, 1, 41, 11), (2, 2), (20, 5))
    ds2_conv2 = ((8, 32, 41, 100), (32, 32, 21, 11), (2, 1), (10, 5))
    for layer in (ds2_conv1, ds2_conv2):
        for kind in ("fwd", "bwd_d", "bwd_w"):
            assert _first(engine, kind, *layer) == "implicit_gemm", (layer, kind)
    stem = ((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3))
    assert _first(engine, "fwd", *stem) == "implicit_gemm"
    # 49 taps over 4 stride phases: col2im still wins; backward weights ties below 100 taps
    assert _first(engine, "bwd_d", *stem) == "im2col_gemm"
    assert _first(engine, "bwd_w", *stem) == "im2col_gemm"


def test_small_and_wide_layers_keep_their_order(engine):
    if not engine.info.is_cpu:
        return
    res4_1x1 = ((1, 512, 28, 28), (1024, 512, 1, 1), (2, 2), (0, 0))
    res3_3x3_s2 = ((1, 128, 56, 56), (128, 128, 3, 3), (2, 2), (1, 1))
    wide_7x7 = ((1, 64, 28, 28), (256, 64, 7, 7), (2, 2), (3, 3))
    for layer in (res4_1x1, res3_3x3_s2, wide_7x7):
        for kind in ("fwd", "bwd_d", "bwd_w"):
            assert _first(engine, kind, *layer) == "im2col_gemm", (layer, kind)


def test_large_kernels_on_gpus():
    """On a GPU (a made-up device: the rule reads its traits): DeepSpeech2's layers go
    implicit in forward and backward weights, backward data keeps im2col + GEMM (col2im),
    the 49-tap stem and the wide 7x7 layer keep their order."""
    from types import SimpleNamespace

    from pydnnl.runtime.heuristics.conv import solver_order

    gpu = SimpleNamespace(is_cpu=False, is_gpu=True)

    def first(kind, src, wei, strides, pad):
        g = validate_conv(src, wei, strides, [0] * len(strides), pad, pad)
        return solver_order(kind, g, gpu, 1.0)[0]

    ds2_conv1 = ((16, 1, 161, 200), (32, 1, 41, 11), (2, 2), (20, 5))
    ds2_conv2 = ((16, 32, 81, 100), (32, 32, 21, 11), (2, 1), (10, 5))
    for layer in (ds2_conv1, ds2_conv2):
        assert first("fwd", *layer) == "implicit_gemm", layer
        assert first("bwd_w", *layer) == "implicit_gemm", layer
        assert first("bwd_d", *layer) == "im2col_gemm", layer
    stem = ((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3))
    wide_7x7 = ((1, 64, 28, 28), (256, 64, 7, 7), (2, 2), (3, 3))
    for layer in (stem, wide_7x7):
        for kind in ("fwd", "bwd_d", "bwd_w"):
            assert first(kind, *layer) == "im2col_gemm", (layer, kind)
