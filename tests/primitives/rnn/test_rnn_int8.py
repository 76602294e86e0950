"""int8 RNN inference (oneDNN's u8/s8 LSTM, LSTMP and GRU) against the float64 reference
:mod:`pydnnl.reference.rnn_int8`, plus the configurations and attributes oneDNN refuses.

Tolerances. The primitive computes in f32 what the reference computes in float64. Before a
state is quantized, ``v * scale + shift`` differs by a few f32 roundings (under 1e-3 of one
quantization step here), so a state rounds the other way only where that value lies that
close to a rounding boundary: a quantized output may differ by one unit, and rarely (each
quantization is a ~1e-3 chance: we allow 3% of the elements). A state that rounded the other
way moves the next step's pre-activations by at most max|w| / (wscale * scale) =
64 / (64 * 32) = 0.03125 per flipped channel (the weights here are in [-64, 64], the weights
scales >= 64, the data scales >= 32); through the gates' slopes (<= 1) and the cell update
the cell state moves by at most ~2 x that, so dst_iter_c is checked against
``2e-5 * T * (1 + |c|)`` (f32 roundings over T steps) on 97% of its elements and against the
one-flip bound 0.1 * (1 + |c|) everywhere. f32 (dequantized) outputs are
``(q - k shift) / scale``: one unit of q is 1 / scale (k = 2 and two units for
bidirectional_sum).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference.rnn_int8 import rnn_int8_forward

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
MD = dnnl.memory.desc
NP = {dt.u8: np.uint8, dt.s8: np.int8, dt.f32: np.float32}
INFER = dnnl.prop_kind.forward_inference
L2R = "unidirectional_left2right"
# benchdnn's quantization of its int8 configurations (rnn_aux.cpp, set_qparams): u8 data in
# [0, 127] with mean 28 -> scale 127 / 2, shift 28; s8 data in [0, 64] -> scale 32, no shift;
# s8 weights in [-64, 64] -> scales 64 * (1 + i / n)
QPARAMS = {"u8": (63.5, 28.0), "s8": (32.0, 0.0)}


def _scales(n: int) -> np.ndarray:
    return 64.0 * (1.0 + np.arange(n) / n)


def _run(eng, stream, cell="lstm", qdt="u8", src_iter="u8", dst_layer="u8",
         direction=L2R, L=1, proj=False, mask=24, T=3, N=3, C=8, DIC=6, seed=0,
         with_src_iter=True, weights_tag=tag.any, set_attr=True):
    """Create and run one int8 problem; return (pd, outputs, reference outputs, data scale)."""
    rng = np.random.default_rng(seed)
    D = 2 if direction.startswith("bidirectional") else 1
    G = 4 if cell == "lstm" else 3
    dic = DIC if proj else C
    slc = C if L == 1 else dic
    dlc = dic * (2 if direction == "bidirectional_concat" else 1)
    Q = getattr(dt, qdt)
    lo, hi = (0, 127) if qdt == "u8" else (-64, 64)
    scale, shift = QPARAMS[qdt] if set_attr else (1.0, 0.0)
    vals = {
        dnnl.ARG_SRC_LAYER: rng.integers(lo, hi + 1, (T, N, slc)),
        dnnl.ARG_WEIGHTS_LAYER: rng.integers(-64, 65, (L, D, slc, G, C)),
        dnnl.ARG_WEIGHTS_ITER: rng.integers(-64, 65, (L, D, dic, G, C)),
        dnnl.ARG_BIAS: rng.standard_normal((L, D, G, C)).astype(np.float32),
    }
    si_dt = getattr(dt, src_iter)
    if with_src_iter:
        vals[dnnl.ARG_SRC_ITER] = (rng.uniform(-1, 1, (L, D, N, dic)).astype(np.float32)
                                   if src_iter == "f32" else rng.integers(lo, hi + 1,
                                                                          (L, D, N, dic)))
    descs = dict(
        src_layer_desc=MD([T, N, slc], Q, tag.tnc),
        src_iter_desc=MD([L, D, N, dic], si_dt, tag.ldnc) if with_src_iter else None,
        weights_layer_desc=MD([L, D, slc, G, C], dt.s8, weights_tag),
        weights_iter_desc=MD([L, D, dic, G, C], dt.s8, weights_tag),
        bias_desc=MD([L, D, G, C], dt.f32, tag.ldgo),
        dst_layer_desc=MD([T, N, dlc], getattr(dt, dst_layer), tag.tnc),
        dst_iter_desc=MD([L, D, N, dic], si_dt, tag.ldnc))
    attr = dnnl.primitive_attr()
    wsc = _scales(G * C) if mask else np.array([70.0])
    psc = _scales(dic) if mask else np.array([80.0])
    if set_attr:
        attr.set_rnn_data_qparams(scale, shift)
        attr.set_rnn_weights_qparams(mask, wsc.tolist())
    else:
        wsc = psc = np.array([1.0])
    if cell == "lstm":
        vals[dnnl.ARG_SRC_ITER_C] = rng.standard_normal((L, D, N, C)).astype(np.float32)
        descs.update(src_iter_c_desc=MD([L, D, N, C], dt.f32, tag.ldnc),
                     dst_iter_c_desc=MD([L, D, N, C], dt.f32, tag.ldnc))
        if proj:
            vals[dnnl.ARG_WEIGHTS_PROJECTION] = rng.integers(-64, 65, (L, D, C, dic))
            descs["weights_projection_desc"] = MD([L, D, C, dic], dt.s8, weights_tag)
            if set_attr:
                attr.set_rnn_weights_projection_qparams(8 if mask else 0, psc.tolist())
        cls = dnnl.lstm_forward
    else:
        cls = dnnl.gru_forward
    pd = cls.primitive_desc(eng, INFER, getattr(dnnl.rnn_direction, direction), **descs,
                            attr=attr)
    args = {}
    for a, spec in pd.arg_specs().items():
        if a in vals:
            args[a] = dnnl.memory(spec.md, eng, np.asarray(vals[a]).astype(NP[spec.md.data_type]))
        else:
            args[a] = dnnl.memory(spec.md, eng)
    cls(pd).execute(stream, args)
    stream.wait()
    got = {k: args[a].to_numpy().astype(np.float64) for k, a in (
        ("dst_layer", dnnl.ARG_DST_LAYER), ("dst_iter", dnnl.ARG_DST_ITER),
        ("dst_iter_c", dnnl.ARG_DST_ITER_C)) if a in args}
    ref = rnn_int8_forward(
        "vanilla_" + cell, vals[dnnl.ARG_SRC_LAYER], vals.get(dnnl.ARG_SRC_ITER),
        vals.get(dnnl.ARG_SRC_ITER_C), vals[dnnl.ARG_WEIGHTS_LAYER],
        vals[dnnl.ARG_WEIGHTS_ITER], vals[dnnl.ARG_BIAS], direction=direction,
        data_scale=scale, data_shift=shift, weights_scales=wsc, data_type=qdt,
        src_iter_dt=src_iter, weights_projection=vals.get(dnnl.ARG_WEIGHTS_PROJECTION),
        projection_scales=psc, dst_layer_dt=dst_layer, dst_iter_dt=src_iter)
    return pd, got, ref, scale


def _check(got, ref, scale, dst_layer, src_iter, direction, T):
    """The criteria of the module docstring."""
    for name, out_dt in (("dst_layer", dst_layer), ("dst_iter", src_iter)):
        g, r = got[name].reshape(ref[name].shape), ref[name]
        # one quantization step, in the output's units
        unit = 1.0 if out_dt != "f32" else 1.0 / scale
        units = 2 if (name == "dst_layer" and direction == "bidirectional_sum"
                      and out_dt == "f32") else 1
        diff = np.abs(g - r)
        assert diff.max() <= units * unit * (1 + 1e-5), (name, diff.max())
        assert np.mean(diff > unit * 1e-3) <= 0.03, (name, np.mean(diff > unit * 1e-3))
    if ref["dst_iter_c"] is not None:
        g, r = got["dst_iter_c"].reshape(ref["dst_iter_c"].shape), ref["dst_iter_c"]
        diff, mag = np.abs(g - r), 1 + np.abs(r)
        assert np.all(diff <= 0.1 * mag), diff.max()
        assert np.mean(diff > 2e-5 * T * mag) <= 0.03


# (id, cell, data type, src_iter/dst_iter type, dst_layer type, direction, L, projection, mask)
CASES = [
    ("lstm-u8u8u8u8-common", "lstm", "u8", "u8", "u8", L2R, 1, False, 0),
    ("lstm-u8u8u8f32-peroc-r2l", "lstm", "u8", "u8", "f32", "unidirectional_right2left", 1,
     False, 24),
    ("lstm-f32u8f32u8-concat", "lstm", "u8", "f32", "u8", "bidirectional_concat", 1, False, 24),
    ("lstm-f32u8f32f32-sum", "lstm", "u8", "f32", "f32", "bidirectional_sum", 1, False, 0),
    ("lstm-s8s8s8s8-peroc-2layers", "lstm", "s8", "s8", "s8", L2R, 2, False, 24),
    ("lstm-s8s8s8f32-common", "lstm", "s8", "s8", "f32", L2R, 1, False, 0),
    ("lstm-f32s8f32f32-sum", "lstm", "s8", "f32", "f32", "bidirectional_sum", 1, False, 24),
    ("lstmp-u8u8u8u8-peroc", "lstm", "u8", "u8", "u8", L2R, 1, True, 24),
    ("lstmp-u8u8u8f32-common-2layers", "lstm", "u8", "u8", "f32", L2R, 2, True, 0),
    ("lstmp-s8s8s8s8-concat", "lstm", "s8", "s8", "s8", "bidirectional_concat", 1, True, 24),
    ("gru-u8u8u8u8-common", "gru", "u8", "u8", "u8", L2R, 1, False, 0),
    ("gru-u8u8u8f32-peroc-2layers", "gru", "u8", "u8", "f32", L2R, 2, False, 24),
    ("gru-f32u8f32u8-sum", "gru", "u8", "f32", "u8", "bidirectional_sum", 1, False, 24),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_int8_matches_reference(first_engine, case):
    _, cell, qdt, si, dl, direction, L, proj, mask = case
    s = dnnl.stream(first_engine)
    pd, got, ref, scale = _run(first_engine, s, cell, qdt, si, dl, direction, L, proj, mask)
    _check(got, ref, scale, dl, si, direction, 3)
    assert "int8 emulated" in pd.impl_info_str()


def test_int8_defaults_plain_weights_no_src_iter(first_engine):
    """No attributes: oneDNN's defaults (data scale 1, shift 0, weights scale 1); ldigo
    weights given as they lie; no src_iter: the state starts at q(0)."""
    s = dnnl.stream(first_engine)
    _, got, ref, scale = _run(first_engine, s, "gru", "u8", "u8", "f32", L2R, 1, False, 0,
                              with_src_iter=False, weights_tag=tag.ldigo, set_attr=False)
    # with scale 1 the accumulators are huge: every gate saturates, the states are exact
    _check(got, ref, scale, "f32", "u8", L2R, 3)


# -- what oneDNN refuses ---------------------------------------------------------------------
def _descs(cell="lstm", qdt=dt.u8, **over):
    L, D, T, N, C = 1, 1, 2, 2, 4
    G = 4 if cell == "lstm" else 3
    d = dict(src_layer_desc=MD([T, N, C], qdt, tag.tnc),
             src_iter_desc=MD([L, D, N, C], qdt, tag.ldnc),
             weights_layer_desc=MD([L, D, C, G, C], dt.s8, tag.any),
             weights_iter_desc=MD([L, D, C, G, C], dt.s8, tag.any),
             bias_desc=MD([L, D, G, C], dt.f32, tag.ldgo),
             dst_layer_desc=MD([T, N, C], qdt, tag.tnc),
             dst_iter_desc=MD([L, D, N, C], qdt, tag.ldnc))
    if cell == "lstm":
        d.update(src_iter_c_desc=MD([L, D, N, C], dt.f32, tag.ldnc),
                 dst_iter_c_desc=MD([L, D, N, C], dt.f32, tag.ldnc))
    d.update(over)
    return d


def _attr(mask=0, scales=(64.0,), shift=28.0, pmask=None, pscales=None):
    a = dnnl.primitive_attr()
    a.set_rnn_data_qparams(63.5, shift)
    a.set_rnn_weights_qparams(mask, list(scales))
    if pmask is not None:
        a.set_rnn_weights_projection_qparams(pmask, list(pscales))
    return a


BAD = [
    ("training", dnnl.lstm_forward, dnnl.prop_kind.forward_training, _descs(), _attr(),
     dnnl.unimplemented, "forward_inference"),
    ("s8-gru", dnnl.gru_forward, INFER, _descs("gru", dt.s8), _attr(shift=0.0),
     dnnl.unimplemented, "LSTM only"),
    ("lbr-gru", dnnl.lbr_gru_forward, INFER,
     _descs("gru", bias_desc=MD([1, 1, 4, 4], dt.f32, tag.ldgo)), _attr(), dnnl.unimplemented,
     "LSTM and GRU only"),
    ("bias-s8", dnnl.lstm_forward, INFER, _descs(bias_desc=MD([1, 1, 4, 4], dt.s8, tag.ldgo)),
     _attr(), dnnl.unimplemented, "bias_desc must be f32"),
    ("weights-f32", dnnl.lstm_forward, INFER,
     _descs(weights_iter_desc=MD([1, 1, 4, 4, 4], dt.f32, tag.any)), _attr(),
     dnnl.unimplemented, "weights_iter_desc must be s8"),
    ("iter-mixed", dnnl.lstm_forward, INFER,
     _descs(dst_iter_desc=MD([1, 1, 2, 4], dt.f32, tag.ldnc)), _attr(),
     dnnl.unimplemented, "both be u8 or both f32"),
    ("peephole", dnnl.lstm_forward, INFER,
     _descs(weights_peephole_desc=MD([1, 1, 3, 4], dt.f32, tag.ldgo)), _attr(),
     dnnl.unimplemented, "peephole"),
    ("s8-shift", dnnl.lstm_forward, INFER, _descs(qdt=dt.s8), _attr(shift=3.0),
     dnnl.unimplemented, "no data shift"),
    ("mask-3", dnnl.lstm_forward, INFER, _descs(), _attr(mask=3, scales=[1.0] * 16),
     dnnl.unimplemented, "mask must be one of 0, 24"),
    ("scales-length", dnnl.lstm_forward, INFER, _descs(), _attr(mask=24, scales=[1.0] * 15),
     dnnl.invalid_arguments, "needs 16 scales"),
    ("common-two-scales", dnnl.lstm_forward, INFER, _descs(), _attr(scales=[1.0, 2.0]),
     dnnl.invalid_arguments, "needs 1 scale"),
    ("projection-scales", dnnl.lstm_forward, INFER,
     _descs(weights_projection_desc=MD([1, 1, 4, 4], dt.s8, tag.any)),
     _attr(pmask=8, pscales=[1.0] * 3), dnnl.invalid_arguments, "needs 4 scales"),
]


@pytest.mark.parametrize("case", BAD, ids=[b[0] for b in BAD])
def test_int8_refusals(first_engine, case):
    _, cls, prop, descs, attr, err, words = case
    with pytest.raises(err, match=words):
        cls.primitive_desc(first_engine, prop, dnnl.rnn_direction.unidirectional_left2right,
                           **descs, attr=attr)


def test_qparams_on_f32_rnn_refused(first_engine):
    f32 = {k: (MD(v.get_dims(), dt.f32, tag.any) if v is not None else None)
           for k, v in _descs().items()}
    with pytest.raises(dnnl.unimplemented, match="int8"):
        dnnl.lstm_forward.primitive_desc(first_engine, INFER,
                                         dnnl.rnn_direction.unidirectional_left2right, **f32,
                                         attr=_attr())


def test_qparams_setters_validate():
    a = dnnl.primitive_attr()
    with pytest.raises(dnnl.invalid_arguments, match="finite"):
        a.set_rnn_data_qparams(float("nan"), 0.0)
    with pytest.raises(dnnl.invalid_arguments, match="at least one"):
        a.set_rnn_weights_qparams(0, [])
    with pytest.raises(dnnl.invalid_arguments, match="mask"):
        a.set_rnn_weights_projection_qparams(-1, [1.0])
    a.set_rnn_weights_projection_qparams(8, [1.0, 2.0])
    assert a.get_rnn_weights_projection_qparams() == (8, (1.0, 2.0))
    assert not a.is_default()


def test_int8_bad_execute_leaves_outputs(first_engine):
    """An execute whose src_layer memory has the wrong data type raises before any output is
    written."""
    descs = _descs()
    pd = dnnl.lstm_forward.primitive_desc(first_engine, INFER,
                                          dnnl.rnn_direction.unidirectional_left2right,
                                          **descs, attr=_attr())
    args = {a: dnnl.memory(spec.md, first_engine) for a, spec in pd.arg_specs().items()}
    sentinel = np.full(pd.dst_layer_desc().get_dims(), 7, np.uint8)
    args[dnnl.ARG_DST_LAYER] = dnnl.memory(pd.dst_layer_desc(), first_engine, sentinel)
    args[dnnl.ARG_SRC_LAYER] = dnnl.memory(MD([2, 2, 4], dt.f32, tag.tnc), first_engine)
    s = dnnl.stream(first_engine)
    with pytest.raises(dnnl.invalid_arguments):
        dnnl.lstm_forward(pd).execute(s, args)
    s.wait()
    assert np.array_equal(args[dnnl.ARG_DST_LAYER].to_numpy(), sentinel)


# -- the int8 kernels under Oclgrind ---------------------------------------------------------
OCLGRIND_PROBE = r"""
import json, sys
import numpy as np
import pydnnl as dnnl
sys.path.insert(0, TESTS)
import test_rnn_int8 as T

eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
out = {}
# LSTMP, bidirectional_sum, f32 outputs, no src_iter: the quantized zero state, both column
# sums, the projection's requantization, the saturating sum, the dequantization, the cells
pd, got, ref, scale = T._run(eng, s, "lstm", "u8", "f32", "f32", "bidirectional_sum", 1, True,
                             24, T=2, N=2, C=4, DIC=3, with_src_iter=False)
T._check(got, ref, scale, "f32", "f32", "bidirectional_sum", 2)
pd, got, ref, scale = T._run(eng, s, "gru", "u8", "u8", "u8", T.L2R, 1, False, 0, T=2, N=2,
                             C=4)
T._check(got, ref, scale, "u8", "u8", T.L2R, 2)
out["ok"] = True
print(json.dumps(out))
"""


def test_int8_kernels_under_oclgrind():
    """Out-of-bounds accesses, data races and API misuse of the int8 plan's kernels (the
    quantizing cells, column sums, projection requantization, output finishing) on a tiny
    problem, results checked against the reference. Oclgrind's uninitialized-value check is
    left off here: it reports the f32 RNN plan too (its GRU cell kernels, and the zero fills
    of clEnqueueFillBuffer, which it does not count as writes)."""
    import os
    import pathlib
    import re
    import subprocess
    import sys

    here = pathlib.Path(__file__).parent
    sys.path.insert(0, str(here.parent.parent / "kernels"))
    from oclgrind_helpers import PYOPENCL_NV_PROBE, has_oclgrind

    if not has_oclgrind():
        pytest.skip("Oclgrind is not installed")
    probe = f"TESTS = {str(here)!r}\n" + OCLGRIND_PROBE
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYDNNL_VERBOSE", "PYDNNL_DEVICE", "OCLGRIND_UNINITIALIZED")}
    env.update(PYOPENCL_NO_CACHE="1", PYDNNL_NO_KERNEL_CACHE="1", OCLGRIND_CHECK_API="1",
               OCLGRIND_DATA_RACES="1")
    r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    stderr = r.stderr.replace(PYOPENCL_NV_PROBE, "")
    problems = [ln for ln in stderr.splitlines()
                if re.search(r"invalid|error|race", ln, re.IGNORECASE)]
    assert not problems, "Oclgrind reported:\n" + stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["ok"]
