"""kernels.rnn_elementwise_source prints the RNN cell kernels loopy generates: the same kernel
name, argument names, order and declared types, work-group size and launch grid, the same
text with the loopy version the printer was written against (``test_codegen_unchanged``'s
``VERSIONS``), and bitwise the same results on every loopy: the printer keeps loopy's
statements and expression trees (the same operations in the same order, so also the same
floating-point contractions, which the compilers make within one expression only). Each
covered form (every cell kind's forward stages with and without stored gates, peephole, clip
with and without its NaN rule, the vanilla RNN activations, projection strides, a channel
count the work-group does not divide; the backward stages likewise) runs beside loopy's kernel
on the same random buffers (outputs filled beforehand, so what either leaves unwritten is
compared too) with run-time offsets, on every device present (Intel's CPU runtime and PoCL).
int8 and fused-GEMM forward stages return None (loopy keeps them)."""
from __future__ import annotations

import functools
import pathlib
import sys
from dataclasses import replace

import numpy as np
import pytest

from pydnnl.kernels.rnn_elementwise import (
    ElementwiseProblem,
    build_elementwise,
    build_elementwise_loopy,
)
from pydnnl.kernels.rnn_elementwise_bwd import (
    BackwardElementwiseProblem,
    build_elementwise_bwd,
    build_elementwise_bwd_loopy,
)
from pydnnl.kernels.rnn_elementwise_source import elementwise_bwd_source, elementwise_source
from pydnnl.kernels.source import KernelSource

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from printed_kernels import (  # noqa: E402
    declared_types,
    printed_and_loopy,
    run_source,
    same_loopy_version,
)

DHC, SIC, WG, BATCH = 24, 40, 8, 3
CLIP = (-0.5, 0.5, True)

_F = ElementwiseProblem("vanilla_lstm", 0, False, "tanh", 0.0, DHC, SIC, DHC, wg=WG)
FORWARD = {
    "lstm": replace(_F, store_gates=False),
    "lstm_train": _F,
    "lstm_peep_clip_nan": replace(_F, peephole=True, clip=CLIP),
    "lstm_clip_infer": replace(_F, clip=(-0.5, 0.5, False), store_gates=False),
    "lstmp_rows": replace(_F, ld_h=DHC, ld_h_prev=16, peephole=True),
    "lstm_ragged_wg": replace(_F, dhc=20, ld_h=20, store_gates=False),
    "gru_s0": replace(_F, cell="vanilla_gru", ld_h_prev=DHC),
    "gru_s1": replace(_F, cell="vanilla_gru", stage=1, ld_h_prev=DHC, store_gates=False),
    "gru_s1_train": replace(_F, cell="vanilla_gru", stage=1, ld_h_prev=DHC),
    "lbr_gru": replace(_F, cell="lbr_gru", ld_h_prev=DHC),
    "lbr_gru_infer": replace(_F, cell="lbr_gru", ld_h_prev=DHC, store_gates=False),
    "augru_s0": replace(_F, cell="vanilla_augru", ld_h_prev=DHC),
    "augru_s1": replace(_F, cell="vanilla_augru", stage=1, ld_h_prev=DHC),
    "lbr_augru": replace(_F, cell="lbr_augru", ld_h_prev=DHC, store_gates=False),
    "rnn_relu": replace(_F, cell="vanilla_rnn", activation="relu", alpha=0.1),
    "rnn_relu0": replace(_F, cell="vanilla_rnn", activation="relu", store_gates=False),
    "rnn_tanh": replace(_F, cell="vanilla_rnn"),
    "rnn_logistic": replace(_F, cell="vanilla_rnn", activation="logistic", dhc=20, ld_h=20),
    # tanh as 2 / (1 + exp(-2x)) - 1 (CPU inference: heuristics.rnn.cell_tanh_via_exp)
    "lstm_tanh_exp": replace(_F, store_gates=False, tanh_exp=True),
    "lstm_clip_tanh_exp": replace(_F, clip=CLIP, store_gates=False, tanh_exp=True),
    "gru_s1_tanh_exp": replace(_F, cell="vanilla_gru", stage=1, ld_h_prev=DHC,
                               store_gates=False, tanh_exp=True),
    "lbr_gru_tanh_exp": replace(_F, cell="lbr_gru", ld_h_prev=DHC, store_gates=False,
                                tanh_exp=True),
    "rnn_tanh_exp": replace(_F, cell="vanilla_rnn", store_gates=False, tanh_exp=True),
}

_B = BackwardElementwiseProblem("vanilla_lstm", 0, False, "tanh", 0.0, DHC, SIC, DHC, True,
                                wg=WG)
BACKWARD = {
    "lstm": _B,
    "lstm_first_dhp": replace(_B, dhp_assign=True),
    "lstm_peep_clip": replace(_B, peephole=True, clip=CLIP),
    "lstmp": replace(_B, two_dh=False, ld_dh=DHC, peephole=True),
    "lstm_ragged_wg": replace(_B, dhc=20, ld_dh=20),
    "gru_s0": replace(_B, cell="vanilla_gru", ld_h_prev=DHC),
    "gru_s1": replace(_B, cell="vanilla_gru", stage=1, ld_h_prev=DHC, dhp_assign=True),
    "lbr_gru": replace(_B, cell="lbr_gru", ld_h_prev=DHC),
    "augru_s0": replace(_B, cell="vanilla_augru", ld_h_prev=DHC),
    "augru_s1": replace(_B, cell="vanilla_augru", stage=1, ld_h_prev=DHC),
    "lbr_augru": replace(_B, cell="lbr_augru", ld_h_prev=DHC),
    "rnn_relu": replace(_B, cell="vanilla_rnn", activation="relu", alpha=0.1),
    "rnn_tanh": replace(_B, cell="vanilla_rnn"),
    "rnn_logistic": replace(_B, cell="vanilla_rnn", activation="logistic"),
}


@functools.lru_cache(maxsize=None)
def _pair(direction: str, name: str) -> tuple[KernelSource, KernelSource]:
    """(printed, loopy's) sources of one form, generated once for every device."""
    if direction == "fwd":
        return printed_and_loopy(FORWARD[name], elementwise_source, build_elementwise,
                                 build_elementwise_loopy)
    return printed_and_loopy(BACKWARD[name], elementwise_bwd_source, build_elementwise_bwd,
                             build_elementwise_bwd_loopy)


def _buffers(src: KernelSource, seed: int) -> tuple[dict, dict]:
    """Random buffers (4096 floats each, ample for these sizes) and distinct offsets for
    every argument of ``src``; gate and attention values in (0, 1), some values past the
    clip range, one NaN in the gate inputs (the clip's NaN rule)."""
    rng = np.random.default_rng(seed)
    bufs, values = {}, {"batch": BATCH}
    for k, a in enumerate(src.arg_names):
        if a == "batch":
            continue
        if a.endswith("_off"):
            values[a] = 3 + 5 * k
            continue
        x = rng.standard_normal(4096).astype(np.float32)
        if a in ("gates", "att"):
            x = rng.uniform(0.02, 0.98, 4096).astype(np.float32)
        if a == "gx":
            x[values.get("gx_off", 0) + 2 * DHC + 5] = np.nan
        bufs[a] = x
    return bufs, values


def _check(engine, direction: str, name: str) -> None:
    ours, theirs = _pair(direction, name)
    for field in ("name", "arg_names", "global_size", "local_size", "grid", "build_options"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert declared_types(ours) == declared_types(theirs)
    if same_loopy_version():
        assert ours.source == theirs.source
    bufs, values = _buffers(theirs, 7)
    a = run_source(engine, ours, bufs, values)
    b = run_source(engine, theirs, bufs, values)
    for k in bufs:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert any(not np.array_equal(b[k], bufs[k], equal_nan=True) for k in bufs)


@pytest.mark.parametrize("name", sorted(FORWARD))
def test_forward_equals_loopy(engine, name):
    _check(engine, "fwd", name)


@pytest.mark.parametrize("name", sorted(BACKWARD))
def test_backward_equals_loopy(engine, name):
    _check(engine, "bwd", name)


def test_declines():
    p = FORWARD["lstm"]
    int8 = replace(p, quant=(64.0, 128.0, 0, 255), dhc=16, wg=16, ld_h=16, ld_h_prev=16)
    fused = replace(p, fused_k=SIC, ld_src=SIC, ld_u=4 * DHC)
    for q in (int8, fused):
        assert elementwise_source(q) is None
        assert not isinstance(build_elementwise(q), KernelSource)  # loopy's TranslationUnit


def test_tanh_exp_accuracy():
    """The exp form of tanh stays within a few f32 ulps of 1 of tanh over the f32 range,
    ±inf and NaN included (numpy, the same formula in f32)."""
    from pydnnl.kernels.rnn_elementwise import _tanh  # noqa: F401  (the form the kernels print)

    x = np.concatenate([np.linspace(-40, 40, 200001), [-np.inf, np.inf, 0.0, -0.0, 1e-30,
                                                       -1e-30, 3e38, -3e38]]).astype(np.float32)
    with np.errstate(over="ignore"):
        got = np.float32(2) / (np.float32(1) + np.exp(np.float32(-2) * x)) - np.float32(1)
    want = np.tanh(x.astype(np.float64))
    assert np.max(np.abs(got - want)) < 4e-7
    assert np.isnan(np.float32(2) / (np.float32(1) + np.exp(np.float32(np.nan))) - 1)
