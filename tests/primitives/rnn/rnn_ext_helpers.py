"""Test-side driver of the RNN primitives with pydnnl's extensions: builds the descs by
keyword from plain shapes, runs forward_training and backward, returns numpy arrays."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import pydnnl as dnnl

F32 = dnnl.memory.data_type.f32
TAG = dnnl.memory.format_tag
# test name -> (forward class, backward class, reference cell name, G, bias gates, has c)
CELLS = {"lstm": ("lstm_forward", "lstm_backward", "vanilla_lstm", 4, 4, True),
         "gru": ("gru_forward", "gru_backward", "vanilla_gru", 3, 3, False),
         "lbr_gru": ("lbr_gru_forward", "lbr_gru_backward", "lbr_gru", 3, 4, False),
         "rnn": ("vanilla_rnn_forward", "vanilla_rnn_backward", "vanilla_rnn", 1, 1, False)}
_ARG = {"src_layer": dnnl.ARG_SRC_LAYER, "src_iter": dnnl.ARG_SRC_ITER,
        "src_iter_c": dnnl.ARG_SRC_ITER_C, "weights_layer": dnnl.ARG_WEIGHTS_LAYER,
        "weights_iter": dnnl.ARG_WEIGHTS_ITER, "weights_projection": dnnl.ARG_WEIGHTS_PROJECTION,
        "bias": dnnl.ARG_BIAS, "dst_layer": dnnl.ARG_DST_LAYER, "dst_iter": dnnl.ARG_DST_ITER,
        "dst_iter_c": dnnl.ARG_DST_ITER_C}
_TAGS = {"src_layer": TAG.tnc, "src_iter": TAG.ldnc, "src_iter_c": TAG.ldnc,
         "weights_layer": TAG.ldigo, "weights_iter": TAG.ldigo, "weights_projection": TAG.ldio,
         "bias": TAG.ldgo, "dst_layer": TAG.tnc, "dst_iter": TAG.ldnc, "dst_iter_c": TAG.ldnc}
INPUTS = ("src_layer", "src_iter", "src_iter_c", "weights_layer", "weights_iter",
          "weights_projection", "bias")


@dataclass
class Problem:
    cell: str
    T: int
    N: int
    SLC: int
    DHC: int
    L: int = 1
    direction: str = "unidirectional_left2right"
    DIC: int | None = None  # projection size (LSTM), None = no projection
    ext: dnnl.rnn_extensions = field(default_factory=dnnl.rnn_extensions)

    @property
    def D(self) -> int:
        return 2 if self.direction.startswith("bidirectional") else 1

    @property
    def dic(self) -> int:
        return self.DIC or self.DHC

    def dims(self) -> dict:
        c = CELLS[self.cell]
        G, Gb, L, D, N = c[3], c[4], self.L, self.D, self.N
        DLC = 2 * self.dic if self.direction == "bidirectional_concat" else self.dic
        out = {"src_layer": (self.T, N, self.SLC), "src_iter": (L, D, N, self.dic),
               "weights_layer": (L, D, self.SLC, G, self.DHC),
               "weights_iter": (L, D, self.dic, G, self.DHC), "bias": (L, D, Gb, self.DHC),
               "dst_layer": (self.T, N, DLC), "dst_iter": (L, D, N, self.dic)}
        if c[5]:
            out["src_iter_c"] = out["dst_iter_c"] = (L, D, N, self.DHC)
        if self.DIC:
            out["weights_projection"] = (L, D, self.DHC, self.DIC)
        if self.ext.packed:  # [sum(lengths), C] rows
            S = sum(self.ext.seq_lengths)
            out["src_layer"], out["dst_layer"] = (S, self.SLC), (S, DLC)
        if self.ext.no_bias:
            del out["bias"]
        if self.ext.skip_input and L == 1:
            del out["weights_layer"]
        return out

    def arrays(self, seed: int) -> dict:
        rng = np.random.default_rng(seed)
        a = {}
        for name, d in self.dims().items():
            if name in INPUTS:
                scale = 0.5 if name.startswith("weights") else 1.0
                a[name] = rng.uniform(-1, 1, d) * scale
        return a

    def reference(self, a: dict, dropout_scales=None, seq_lengths=None):
        from pydnnl.reference.rnn import rnn_forward

        e = self.ext
        return rnn_forward(
            CELLS[self.cell][2], a["src_layer"], a.get("src_iter"), a.get("src_iter_c"),
            a.get("weights_layer"), a["weights_iter"], a.get("bias"), direction=self.direction,
            weights_projection=a.get("weights_projection"), dtype=np.float64,
            layer_bidirectional=e.layer_bidirectional, skip_input=e.skip_input,
            no_bias=e.no_bias, dropout_scales=dropout_scales,
            clip=e.cell_clip, clip_nan=e.cell_clip_nan,
            **({} if seq_lengths is None else {"seq_lengths": np.asarray(seq_lengths)}))


def _md(dims, name):
    return dnnl.memory.desc(list(dims), F32, TAG.ab if len(dims) == 2 else _TAGS[name])


def _head(engine, p: Problem, prop):
    h = [engine, prop]
    if p.cell == "rnn":
        h.append(dnnl.algorithm.eltwise_tanh)
    h.append(getattr(dnnl.rnn_direction, p.direction))
    return h


def forward_pd(engine, p: Problem, prop=dnnl.prop_kind.forward_training, attr=None):
    descs = {n + "_desc": _md(d, n) for n, d in p.dims().items()}
    cls = getattr(dnnl, CELLS[p.cell][0])
    extra = {} if attr is None else {"attr": attr}
    return cls.primitive_desc(*_head(engine, p, prop), **descs, extensions=p.ext, **extra)


def _nan_scratchpad(engine, pd, args) -> None:
    """A user scratchpad full of NaN: a plan that reads scratch it did not write fails."""
    md = pd.scratchpad_desc()
    if md.get_size():
        nan = np.full(md.get_size() // 4, np.nan, np.float32).view(np.uint8)
        args[dnnl.ARG_SCRATCHPAD] = dnnl.memory(md, engine, nan)


def run(engine, stream, p: Problem, a: dict, *, diff_dst: dict | None = None,
        prop=dnnl.prop_kind.forward_training, executions: int = 1, omit_diff=(),
        nan_scratch: bool = False):
    """Forward (``executions`` times, returning the last) and, given ``diff_dst`` (arrays for
    dst_layer / dst_iter / dst_iter_c), backward. Returns (outputs, gradients or None, fwd
    primitive). ``nan_scratch``: both run on user scratchpads filled with NaN."""
    attr = None
    if nan_scratch:
        attr = dnnl.primitive_attr()
        attr.set_scratchpad_mode(dnnl.scratchpad_mode.user)
    fpd = forward_pd(engine, p, prop, attr)
    dims = p.dims()
    mems, args = {}, {}
    for name, d in dims.items():
        m = dnnl.memory(_md(d, name), engine)
        if name in a:
            m.write(np.ascontiguousarray(a[name], np.float32))
        mems[name] = m
        args[_ARG[name]] = m
    if prop == dnnl.prop_kind.forward_training:
        args[dnnl.ARG_WORKSPACE] = dnnl.memory(fpd.workspace_desc(), engine)
    fwd = getattr(dnnl, CELLS[p.cell][0])(fpd)
    if nan_scratch:
        _nan_scratchpad(engine, fpd, args)
    for _ in range(executions):
        fwd.execute(stream, args)
    stream.wait()
    out = {n: mems[n].to_numpy() for n in ("dst_layer", "dst_iter", "dst_iter_c") if n in mems}
    if diff_dst is None:
        return out, None, fwd
    ddescs = {"diff_" + n + "_desc": _md(d, n) for n, d in dims.items() if n not in omit_diff}
    fdescs = {n + "_desc": _md(d, n) for n, d in dims.items()}
    bcls = getattr(dnnl, CELLS[p.cell][1])
    bpd = bcls.primitive_desc(*_head(engine, p, dnnl.prop_kind.backward), **fdescs, **ddescs,
                              hint_fwd_pd=fpd, **({} if attr is None else {"attr": attr}))
    bargs = dict(args)
    if nan_scratch:
        _nan_scratchpad(engine, bpd, bargs)
    grads = {}
    for name, d in dims.items():
        if name in omit_diff:
            continue
        m = dnnl.memory(_md(d, name), engine)
        if name.startswith("dst"):
            m.write(np.ascontiguousarray(diff_dst.get(name, np.zeros(d)), np.float32))
        else:
            m.write(np.zeros(d, np.float32))
            grads[name] = m
        bargs[_ARG[name] + 128] = m
    bcls(bpd).execute(stream, bargs)
    stream.wait()
    return out, {n: m.to_numpy() for n, m in grads.items()}, fwd


def assert_close(got, want, what: str = "") -> None:
    """The f32 criterion of the RNN tests: 1e-5 relative to the tensor's magnitude."""
    want = np.asarray(want)
    assert np.shape(got) == want.shape, f"{what}: shape {np.shape(got)} != {want.shape}"
    scale = max(1.0, float(np.nanmax(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale, err_msg=what)
