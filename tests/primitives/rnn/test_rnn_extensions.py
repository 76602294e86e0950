"""pydnnl's RNN extensions (per-layer bidirectional stacks, skip input, no bias, LSTM cell
clipping, dropout between layers) against the float64 numpy reference, forward and backward,
on every device present."""
from __future__ import annotations

import pathlib
import sys
import zlib

import numpy as np
import pytest

import pydnnl as dnnl

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from rnn_ext_helpers import CELLS, Problem, assert_close, forward_pd, run  # noqa: E402

from pydnnl.reference.rnn import rnn_backward  # noqa: E402

E = dnnl.rnn_extensions
CASES = {
    "lstm-no_bias": Problem("lstm", 4, 3, 5, 5, ext=E(no_bias=True)),
    "gru-skip-bisum-L2": Problem("gru", 4, 2, 5, 5, L=2, direction="bidirectional_sum",
                                 ext=E(skip_input=True)),
    "rnn-skip-r2l": Problem("rnn", 5, 3, 4, 4, direction="unidirectional_right2left",
                            ext=E(skip_input=True)),
    "lstm-skip-no_bias-L2": Problem("lstm", 3, 2, 4, 4, L=2, ext=E(skip_input=True, no_bias=True)),
    "lbr_gru-layer_bidir-L3": Problem("lbr_gru", 4, 3, 8, 4, L=3, direction="bidirectional_concat",
                                      ext=E(layer_bidirectional=True)),
    "gru-layer_bidir-no_bias-L2": Problem("gru", 3, 2, 6, 3, L=2, direction="bidirectional_concat",
                                          ext=E(layer_bidirectional=True, no_bias=True)),
    "rnn-layer_bidir-L1": Problem("rnn", 4, 2, 5, 3, direction="bidirectional_concat",
                                  ext=E(layer_bidirectional=True)),
    "lstm-clip-biconcat-L2": Problem("lstm", 5, 3, 4, 4, L=2, direction="bidirectional_concat",
                                     ext=E(cell_clip=(-0.3, 0.4))),
    "lstm-clip_nan-l2r": Problem("lstm", 4, 2, 3, 3,
                                 ext=E(cell_clip=(-0.2, 0.5), cell_clip_nan=True)),
    "lstmp-clip-layer_bidir-no_bias": Problem(
        "lstm", 4, 2, 6, 5, L=2, direction="bidirectional_concat", DIC=3,
        ext=E(layer_bidirectional=True, no_bias=True, cell_clip=(-0.4, 0.6))),
}


def _seed(*parts) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode())


def _diff_dst(p: Problem, out: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {n: rng.uniform(-1, 1, v.shape) for n, v in out.items()}


@pytest.mark.sampled(every=2)
@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_and_backward_match_reference(engine, stream, case):
    p = CASES[case]
    a = p.arrays(_seed(case))
    ref_layer, ref_iter, ref_iter_c, cache = p.reference(a)
    dd = _diff_dst(p, {"dst_layer": ref_layer, "dst_iter": ref_iter,
                       **({"dst_iter_c": ref_iter_c} if ref_iter_c is not None else {})},
                   _seed(case, "dd"))
    out, grads, _ = run(engine, stream, p, a, diff_dst=dd)
    assert_close(out["dst_layer"], ref_layer, f"{case} dst_layer")
    assert_close(out["dst_iter"], ref_iter, f"{case} dst_iter")
    if ref_iter_c is not None:
        assert_close(out["dst_iter_c"], ref_iter_c, f"{case} dst_iter_c")
    want = rnn_backward(CELLS[p.cell][2], cache, dd["dst_layer"], dd["dst_iter"],
                        dd.get("dst_iter_c"))
    for name, got in grads.items():
        w = want["diff_" + name]
        if name == "weights_layer" and p.ext.skip_input:
            # layer 0 has no input matrix: its part of the gradient is left as it was (zeros)
            assert np.all(got[0] == 0), f"{case}: skip-input layer 0 weights gradient touched"
            got, w = got[1:], w[1:]
        assert_close(got, w, f"{case} diff_{name}")


@pytest.mark.parametrize("case", ["lstm-clip-biconcat-L2", "lbr_gru-layer_bidir-L3"])
def test_inference_equals_training(engine, stream, case):
    p = CASES[case]
    a = p.arrays(_seed("inf", case))
    inf, _, _ = run(engine, stream, p, a, prop=dnnl.prop_kind.forward_inference)
    trn, _, _ = run(engine, stream, p, a)
    for k in inf:
        np.testing.assert_array_equal(inf[k], trn[k], err_msg=k)


def test_clip_nan_handling(cpu_engine):
    """A NaN cell state propagates without cell_clip_nan and becomes min with it."""
    s = dnnl.stream(cpu_engine)
    for nan, want in ((False, np.nan), (True, -0.25)):
        p = Problem("lstm", 3, 2, 3, 3, ext=E(cell_clip=(-0.25, 0.5), cell_clip_nan=nan))
        a = p.arrays(7)
        a["src_layer"][1, 0, 0] = np.nan
        out, _, _ = run(cpu_engine, s, p, a)
        c = out["dst_iter_c"][0, 0, 0]
        if nan:
            assert np.all(c == want)
        else:
            assert np.all(np.isnan(c))
        assert np.all(np.isfinite(out["dst_iter_c"][0, 0, 1])), "the other sequence is unaffected"


@pytest.mark.parametrize("bad, message", [
    (dict(p=Problem("gru", 3, 2, 4, 4, direction="bidirectional_sum",
                    ext=E(layer_bidirectional=True))), "bidirectional_concat"),
    (dict(p=Problem("gru", 3, 2, 4, 4, L=2, direction="bidirectional_concat",
                    ext=E(layer_bidirectional=True))), "2 x DIC"),
    (dict(p=Problem("lstm", 3, 2, 5, 4, ext=E(skip_input=True))), "SLC (5) must equal DHC (4)"),
    (dict(p=Problem("gru", 3, 2, 4, 4, ext=E(cell_clip=(0, 1)))), "LSTM only"),
])
def test_bad_problems(cpu_engine, bad, message):
    with pytest.raises(dnnl.invalid_arguments,
                       match=message.replace("(", r"\(").replace(")", r"\)")):
        forward_pd(cpu_engine, bad["p"])


def test_bad_extension_values():
    with pytest.raises(dnnl.invalid_arguments, match="dropout must be in"):
        E(dropout=1.0)
    with pytest.raises(dnnl.invalid_arguments, match="min must be <= max"):
        E(cell_clip=(1.0, -1.0))
    with pytest.raises(dnnl.invalid_arguments, match="needs cell_clip"):
        E(cell_clip_nan=True)


def test_no_bias_rejects_a_bias_desc(cpu_engine):
    p = Problem("lstm", 3, 2, 4, 4)
    descs = {n + "_desc": dnnl.memory.desc(list(d), dnnl.memory.data_type.f32,
                                           dnnl.memory.format_tag.any)
             for n, d in p.dims().items()}
    with pytest.raises(dnnl.invalid_arguments, match="bias_desc must be None"):
        dnnl.lstm_forward.primitive_desc(cpu_engine, dnnl.prop_kind.forward_training,
                                         dnnl.rnn_direction.unidirectional_left2right, **descs,
                                         extensions=E(no_bias=True))


def test_backward_takes_extensions_from_hint(cpu_engine):
    p = Problem("lstm", 3, 2, 4, 4, ext=E(cell_clip=(-1, 1)))
    fpd = forward_pd(cpu_engine, p)
    assert fpd.get_extensions() == p.ext
    descs = {n + "_desc": dnnl.memory.desc(list(d), dnnl.memory.data_type.f32,
                                           dnnl.memory.format_tag.any)
             for n, d in p.dims().items()}
    diff = {"diff_" + k: v for k, v in descs.items()}
    with pytest.raises(dnnl.invalid_arguments, match="differ from hint_fwd_pd"):
        dnnl.lstm_backward.primitive_desc(cpu_engine, dnnl.prop_kind.backward,
                                          dnnl.rnn_direction.unidirectional_left2right, **descs,
                                          **diff, hint_fwd_pd=fpd, extensions=E())


# -- variable sequence lengths: each sequence run alone at its own length is the oracle ----------
def _per_sequence(p: Problem, a: dict, dd: dict, lens) -> tuple[dict, dict]:
    """Forward outputs and gradients of running every sequence alone (plain reference)."""
    from pydnnl.reference.rnn import rnn_forward

    dims = p.dims()
    out = {n: np.zeros(dims[n]) for n in ("dst_layer", "dst_iter", "dst_iter_c") if n in dims}
    grads = {n: np.zeros(dims[n]) for n in ("src_layer", "src_iter", "src_iter_c",
                                             "weights_layer", "weights_iter", "bias") if n in dims}
    cell = CELLS[p.cell][2]
    for n, ln in enumerate(lens):
        def one(x, n=n):
            return None if x is None else x[:, :, n:n + 1]
        y, hy, cy, cache = rnn_forward(cell, a["src_layer"][:ln, n:n + 1], one(a["src_iter"]),
                                       one(a.get("src_iter_c")), a["weights_layer"],
                                       a["weights_iter"], a["bias"], direction=p.direction,
                                       dtype=np.float64)
        out["dst_layer"][:ln, n] = y[:, 0]
        out["dst_iter"][:, :, n] = hy[:, :, 0]
        if cy is not None:
            out["dst_iter_c"][:, :, n] = cy[:, :, 0]
        r = rnn_backward(cell, cache, dd["dst_layer"][:ln, n:n + 1], one(dd["dst_iter"]),
                         one(dd.get("dst_iter_c")))
        grads["src_layer"][:ln, n:n + 1] = r["diff_src_layer"]
        grads["src_iter"][:, :, n:n + 1] = r["diff_src_iter"]
        if "src_iter_c" in grads:
            grads["src_iter_c"][:, :, n:n + 1] = r["diff_src_iter_c"]
        for k in ("weights_layer", "weights_iter", "bias"):
            grads[k] += r["diff_" + k]
    return out, grads


_DIRS = ("unidirectional_left2right", "unidirectional_right2left", "bidirectional_concat",
         "bidirectional_sum")
# every cell kind and direction; lengths unsorted, or sorted (non-increasing) every other case
VL_CASES = [(cell, direction, L, (3, 5, 1, 5, 2) if (i + k) % 2 else (5, 4, 4, 2, 1))
            for i, (cell, L) in enumerate((("lstm", 2), ("gru", 1), ("lbr_gru", 2), ("rnn", 1)))
            for k, direction in enumerate(_DIRS)]


@pytest.mark.parametrize("cell, direction, L, lens", VL_CASES,
                         ids=[f"{c}-{d}-L{L}-"
                              f"{'sorted' if list(x) == sorted(x, reverse=True) else 'unsorted'}"
                              for c, d, L, x in VL_CASES])
def test_sequence_lengths_match_each_sequence_alone(engine, stream, cell, direction, L, lens):
    p = Problem(cell, 5, 5, 4, 4, L=L, direction=direction, ext=E(seq_lengths=lens))
    a = p.arrays(_seed(cell, direction, L, lens))
    rng = np.random.default_rng(_seed("dd", cell))
    dims = p.dims()
    dd = {n: rng.uniform(-1, 1, dims[n]) for n in ("dst_layer", "dst_iter", "dst_iter_c")
          if n in dims}
    want_out, want_grads = _per_sequence(p, a, dd, lens)
    out, grads, _ = run(engine, stream, p, a, diff_dst=dd)
    for n, w in want_out.items():
        assert_close(out[n], w, n)
    for n, w in want_grads.items():
        assert_close(grads[n], w, "diff_" + n)


def test_sequence_lengths_with_extensions_match_reference(engine, stream):
    """Lengths together with per-layer bidirectional layers, projection, clipping, no bias."""
    lens = (4, 2, 3)
    p = Problem("lstm", 4, 3, 6, 5, L=2, direction="bidirectional_concat", DIC=3,
                ext=E(layer_bidirectional=True, no_bias=True, cell_clip=(-0.4, 0.6),
                      seq_lengths=lens))
    a = p.arrays(_seed("vl-ext"))
    ref_layer, ref_iter, ref_iter_c, cache = p.reference(a, seq_lengths=lens)
    rng = np.random.default_rng(3)
    dd = {"dst_layer": rng.uniform(-1, 1, ref_layer.shape),
          "dst_iter": rng.uniform(-1, 1, ref_iter.shape),
          "dst_iter_c": rng.uniform(-1, 1, ref_iter_c.shape)}
    out, grads, _ = run(engine, stream, p, a, diff_dst=dd)
    assert_close(out["dst_layer"], ref_layer, "dst_layer")
    assert_close(out["dst_iter"], ref_iter, "dst_iter")
    assert_close(out["dst_iter_c"], ref_iter_c, "dst_iter_c")
    want = rnn_backward("vanilla_lstm", cache, dd["dst_layer"], dd["dst_iter"], dd["dst_iter_c"])
    for name, got in grads.items():
        assert_close(got, want["diff_" + name], f"diff_{name}")


@pytest.mark.parametrize("cell, direction, L", [("lstm", "unidirectional_left2right", 2),
                                                ("lbr_gru", "bidirectional_concat", 1),
                                                ("gru", "unidirectional_right2left", 1)])
def test_sequence_lengths_without_diff_dst_iter_on_a_nan_scratchpad(engine, stream, cell,
                                                                   direction, L):
    """No diff_dst_iter (a sequence's state gradient starts at zero at its last step) and
    scratchpads full of NaN: the steps read no row of scratch that no step wrote (padding
    rows are never cleared between steps)."""
    lens = (2, 6, 6, 3)
    p = Problem(cell, 6, 4, 5, 5, L=L, direction=direction, ext=E(seq_lengths=lens))
    a = p.arrays(_seed("nan", cell))
    y, h, c, cache = p.reference(a, seq_lengths=lens)
    rng = np.random.default_rng(_seed("nan-dd", cell))
    dd = {"dst_layer": rng.uniform(-1, 1, y.shape)}
    out, grads, _ = run(engine, stream, p, a, diff_dst=dd, nan_scratch=True,
                        omit_diff=("dst_iter", "dst_iter_c"))
    assert_close(out["dst_layer"], y, "dst_layer")
    assert_close(out["dst_iter"], h, "dst_iter")
    want = rnn_backward(CELLS[cell][2], cache, dd["dst_layer"], np.zeros(h.shape),
                        None if c is None else np.zeros(c.shape))
    for name, got in grads.items():
        assert_close(got, want["diff_" + name], f"diff_{name}")


@pytest.mark.parametrize("lens, message", [((3, 2), "has 2 lengths, the batch N is 3"),
                                           ((3, 7, 1), r"must be in \[1, T = 4\]")])
def test_bad_sequence_lengths(cpu_engine, lens, message):
    with pytest.raises(dnnl.invalid_arguments, match=message):
        forward_pd(cpu_engine, Problem("gru", 4, 3, 4, 4, ext=E(seq_lengths=lens)))


def test_bad_sequence_length_values():
    for bad in ((0, 2), (-1,), (1.5, 2), ()):
        with pytest.raises(dnnl.invalid_arguments, match="seq_lengths"):
            E(seq_lengths=bad)


# -- dropout between layers ---------------------------------------------------------------------
def _dropout_scales(p: Problem, executions_before: int = 0) -> np.ndarray:
    """The masks the primitive documents: Philox counter block k (L-1) D + l D + d."""
    from pydnnl.reference.philox import dropout_scales

    e = p.ext
    n = p.T * p.N * p.dic
    out = np.zeros((p.L - 1, p.D, p.T, p.N, p.dic))
    for l in range(p.L - 1):
        for d in range(p.D):
            off = executions_before * (p.L - 1) * p.D + l * p.D + d
            out[l, d] = dropout_scales(e.dropout_seed, off, n, e.dropout).reshape(p.T, p.N, p.dic)
    return out


DROPOUT_CASES = {
    "lstm-l2r-L3": Problem("lstm", 4, 3, 5, 5, L=3, ext=E(dropout=0.4, dropout_seed=11)),
    "gru-layer_bidir-L2": Problem("gru", 3, 2, 6, 3, L=2, direction="bidirectional_concat",
                                  ext=E(dropout=0.5, dropout_seed=2 ** 40 + 3,
                                        layer_bidirectional=True)),
    "lstmp-bisum-L2-clip": Problem("lstm", 3, 2, 3, 4, L=2, direction="bidirectional_sum", DIC=3,
                                   ext=E(dropout=0.3, cell_clip=(-0.5, 0.5))),
}


@pytest.mark.parametrize("case", sorted(DROPOUT_CASES))
def test_dropout_matches_reference_with_documented_masks(engine, stream, case):
    p = DROPOUT_CASES[case]
    a = p.arrays(_seed("drop", case))
    # the second execution (counter blocks advance by one execution)
    scales = _dropout_scales(p, executions_before=1)
    ref_layer, ref_iter, ref_iter_c, cache = p.reference(a, dropout_scales=scales)
    rng = np.random.default_rng(_seed("drop-dd", case))
    dd = {"dst_layer": rng.uniform(-1, 1, ref_layer.shape),
          "dst_iter": rng.uniform(-1, 1, ref_iter.shape)}
    if ref_iter_c is not None:
        dd["dst_iter_c"] = rng.uniform(-1, 1, ref_iter_c.shape)
    out, grads, fwd = run(engine, stream, p, a, diff_dst=dd, executions=2)
    assert fwd.dropout_offset == 2
    assert_close(out["dst_layer"], ref_layer, "dst_layer")
    assert_close(out["dst_iter"], ref_iter, "dst_iter")
    want = rnn_backward(CELLS[p.cell][2], cache, dd["dst_layer"], dd["dst_iter"],
                        dd.get("dst_iter_c"))
    for name, got in grads.items():
        assert_close(got, want["diff_" + name], f"diff_{name}")


def test_dropout_is_ignored_in_inference_and_reproducible(cpu_engine):
    s = dnnl.stream(cpu_engine)
    base = Problem("lstm", 4, 3, 5, 5, L=2)
    a = base.arrays(5)
    plain, _, _ = run(cpu_engine, s, base, a, prop=dnnl.prop_kind.forward_inference)
    dropped = Problem("lstm", 4, 3, 5, 5, L=2, ext=E(dropout=0.5, dropout_seed=1))
    inf, _, _ = run(cpu_engine, s, dropped, a, prop=dnnl.prop_kind.forward_inference)
    np.testing.assert_array_equal(inf["dst_layer"], plain["dst_layer"])
    one, _, _ = run(cpu_engine, s, dropped, a)
    again, _, _ = run(cpu_engine, s, dropped, a)
    other, _, _ = run(cpu_engine, s,
                      Problem("lstm", 4, 3, 5, 5, L=2, ext=E(dropout=0.5, dropout_seed=2)), a)
    np.testing.assert_array_equal(one["dst_layer"], again["dst_layer"])  # same seed, same result
    assert not np.array_equal(one["dst_layer"], other["dst_layer"])
    assert not np.array_equal(one["dst_layer"], plain["dst_layer"])


@pytest.mark.parametrize("cell, direction", [("lstm", "bidirectional_concat"),
                                             ("lbr_gru", "unidirectional_right2left"),
                                             ("rnn", "bidirectional_sum")])
def test_packed_sequences_equal_the_padded_form(engine, stream, cell, direction):
    """PackedSequence-style [rows, C] input and output against the padded form (checked
    against per-sequence runs above), packed with the reference's pack_padded."""
    from pydnnl.reference.rnn import pack_padded

    lens = (5, 4, 4, 2, 1)
    padded = Problem(cell, 5, 5, 4, 4, L=2, direction=direction, ext=E(seq_lengths=lens))
    packed = Problem(cell, 5, 5, 4, 4, L=2, direction=direction,
                     ext=E(seq_lengths=lens, packed=True))
    a = padded.arrays(_seed("packed", cell))
    rng = np.random.default_rng(_seed("packed-dd", cell))
    dims = padded.dims()
    dd = {n: rng.uniform(-1, 1, dims[n]) for n in ("dst_layer", "dst_iter", "dst_iter_c")
          if n in dims}

    def pack(x):
        data, batch_sizes, order = pack_padded(x, np.array(lens))
        assert order is None or list(order) == list(range(len(lens)))
        return data

    out_p, grads_p, _ = run(engine, stream, padded, a, diff_dst=dd)
    out_k, grads_k, _ = run(engine, stream, packed, dict(a, src_layer=pack(a["src_layer"])),
                            diff_dst=dict(dd, dst_layer=pack(dd["dst_layer"])))
    assert_close(out_k["dst_layer"], pack(out_p["dst_layer"]), "dst_layer")
    for n in ("dst_iter", "dst_iter_c"):
        if n in out_p:
            assert_close(out_k[n], out_p[n], n)
    assert_close(grads_k["src_layer"], pack(grads_p["src_layer"]), "diff_src_layer")
    for n, g in grads_p.items():
        if n != "src_layer":
            assert_close(grads_k[n], g, "diff_" + n)


def test_packed_needs_sorted_lengths_and_matching_rows(cpu_engine):
    with pytest.raises(dnnl.invalid_arguments, match="non-increasing"):
        E(seq_lengths=(2, 3), packed=True)
    p = Problem("gru", 3, 2, 4, 4, ext=E(seq_lengths=(3, 2), packed=True))
    descs = {n + "_desc": dnnl.memory.desc(list(d), dnnl.memory.data_type.f32,
                                           dnnl.memory.format_tag.any)
             for n, d in p.dims().items()}
    descs["src_layer_desc"] = dnnl.memory.desc([6, 4], dnnl.memory.data_type.f32,
                                               dnnl.memory.format_tag.ab)
    with pytest.raises(dnnl.invalid_arguments, match="has 6 rows, the sum of seq_lengths is 5"):
        dnnl.gru_forward.primitive_desc(cpu_engine, dnnl.prop_kind.forward_training,
                                        dnnl.rnn_direction.unidirectional_left2right, **descs,
                                        extensions=p.ext)


def test_dropout_output_splits_a_stack_over_two_primitives(engine, stream):
    """A 2-layer stack with dropout equals layer 0 with dropout_output feeding layer 1, when
    layer 0's mask is the one the 2-layer primitive draws (same seed, same counter block)."""
    ext = dict(dropout=0.5, dropout_seed=9)
    both = Problem("gru", 4, 3, 5, 5, L=2, ext=E(**ext))
    a = both.arrays(_seed("split"))
    rng = np.random.default_rng(1)
    dims = both.dims()
    dd = {n: rng.uniform(-1, 1, dims[n]) for n in ("dst_layer", "dst_iter")}
    out2, g2, _ = run(engine, stream, both, a, diff_dst=dd)

    def layer(x, l, p, dst_layer_grad):
        one = {k: (v[l:l + 1] if k != "src_layer" else x) for k, v in a.items()}
        return run(engine, stream, p, one, diff_dst={"dst_layer": dst_layer_grad,
                                                     "dst_iter": dd["dst_iter"][l:l + 1]})

    top = Problem("gru", 4, 3, 5, 5)
    bottom = Problem("gru", 4, 3, 5, 5, ext=E(dropout_output=True, **ext))
    out0, _, _ = layer(a["src_layer"], 0, bottom, np.zeros(dims["dst_layer"]))
    out1, g1, _ = layer(out0["dst_layer"], 1, top, dd["dst_layer"])
    _, g0, _ = layer(a["src_layer"], 0, bottom, g1["src_layer"])
    assert_close(out1["dst_layer"], out2["dst_layer"], "dst_layer")
    assert_close(g0["src_layer"], g2["src_layer"], "diff_src_layer")
    for k in ("weights_layer", "weights_iter", "bias"):
        assert_close(np.concatenate([g0[k], g1[k]]), g2[k], "diff_" + k)


@pytest.mark.parametrize("direction", ["unidirectional_left2right", "bidirectional_sum"])
def test_sequence_lengths_without_state_gradients(engine, stream, direction):
    """No diff_dst_iter / diff_dst_iter_c descs: the state gradients of sequences that end
    early start from zero (their rows must not carry anything over)."""
    lens = (5, 2, 4, 1)
    p = Problem("lstm", 5, 4, 3, 3, L=2, direction=direction, ext=E(seq_lengths=lens))
    a = p.arrays(_seed("no-ddi", direction))
    dims = p.dims()
    dd = {"dst_layer": np.random.default_rng(2).uniform(-1, 1, dims["dst_layer"]),
          "dst_iter": np.zeros(dims["dst_iter"]), "dst_iter_c": np.zeros(dims["dst_iter_c"])}
    want_out, want_grads = _per_sequence(p, a, dd, lens)
    for _ in range(2):  # the second run reuses scratch memory the first one left dirty
        out, grads, _ = run(engine, stream, p, a, diff_dst=dd, omit_diff=("dst_iter", "dst_iter_c"))
    for n, w in want_grads.items():
        assert_close(grads[n], w, "diff_" + n)
