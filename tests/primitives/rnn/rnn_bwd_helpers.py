"""Shared helpers of the RNN backward primitive tests: problems, desc building in oneDNN's
positional order, forward_training + backward execution, the float64 reference gradients and
the finite-difference oracle.

Everything here is test-side: shapes, tags, signatures and argument numbers are spelled out
from oneDNN's documentation (dnnl_types.h and the RNN developer guide), not read from the
library under test.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

import pydnnl as dnnl
from pydnnl.reference.rnn import rnn_backward, rnn_forward

dt = dnnl.memory.data_type
tag = dnnl.memory.format_tag
F32 = dt.f32
OVERWRITE = dnnl.rnn_flags.diff_weights_overwrite

DIRECTIONS = ("unidirectional_left2right", "unidirectional_right2left",
              "bidirectional_concat", "bidirectional_sum")


# --------------------------------------------------------------------------------------------
# cell kinds
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    """One cell kind as the tests see it."""

    name: str
    fwd: str                 # forward primitive class name
    bwd: str                 # backward primitive class name
    cell: str                # the reference's cell name
    act: str | None = None   # vanilla RNN activation
    alpha: float = 0.0
    peephole: bool = False
    projection: bool = False

    @property
    def has_c(self) -> bool:
        return self.cell == "vanilla_lstm"

    @property
    def augru(self) -> bool:
        return self.cell in ("vanilla_augru", "lbr_augru")

    @property
    def gates(self) -> int:
        return {"vanilla_rnn": 1, "vanilla_lstm": 4}.get(self.cell, 3)

    @property
    def bias_gates(self) -> int:
        return self.gates + (1 if self.cell in ("lbr_gru", "lbr_augru") else 0)

    @property
    def fwd_cls(self):
        return getattr(dnnl, self.fwd)

    @property
    def bwd_cls(self):
        return getattr(dnnl, self.bwd)


def _c(name, base, cell, **kw):
    return Cell(name, base + "_forward", base + "_backward", cell, **kw)


CELLS = {c.name: c for c in (
    _c("rnn_relu", "vanilla_rnn", "vanilla_rnn", act="relu", alpha=0.1),
    _c("rnn_tanh", "vanilla_rnn", "vanilla_rnn", act="tanh"),
    _c("rnn_logistic", "vanilla_rnn", "vanilla_rnn", act="logistic"),
    _c("lstm", "lstm", "vanilla_lstm"),
    _c("lstm_peephole", "lstm", "vanilla_lstm", peephole=True),
    _c("lstm_projection", "lstm", "vanilla_lstm", projection=True),
    _c("lstm_peephole_projection", "lstm", "vanilla_lstm", peephole=True, projection=True),
    _c("gru", "gru", "vanilla_gru"),
    _c("lbr_gru", "lbr_gru", "lbr_gru"),
    _c("augru", "augru", "vanilla_augru"),
    _c("lbr_augru", "lbr_augru", "lbr_augru"),
)}
NON_AUGRU = [k for k, c in CELLS.items() if not c.augru]
AUGRU = [k for k, c in CELLS.items() if c.augru]
ACT_ALG = {"relu": dnnl.algorithm.eltwise_relu, "tanh": dnnl.algorithm.eltwise_tanh,
           "logistic": dnnl.algorithm.eltwise_logistic}

# forward desc name -> (execution argument, oneDNN's plain tag, reference array name)
FWD = {
    "src_layer_desc": (dnnl.ARG_SRC_LAYER, "tnc", "src_layer"),
    "src_iter_desc": (dnnl.ARG_SRC_ITER, "ldnc", "src_iter"),
    "src_iter_c_desc": (dnnl.ARG_SRC_ITER_C, "ldnc", "src_iter_c"),
    "attention_desc": (dnnl.ARG_AUGRU_ATTENTION, "tnc", "attention"),
    "weights_layer_desc": (dnnl.ARG_WEIGHTS_LAYER, "ldigo", "weights_layer"),
    "weights_iter_desc": (dnnl.ARG_WEIGHTS_ITER, "ldigo", "weights_iter"),
    "weights_peephole_desc": (dnnl.ARG_WEIGHTS_PEEPHOLE, "ldgo", "weights_peephole"),
    "weights_projection_desc": (dnnl.ARG_WEIGHTS_PROJECTION, "ldio", "weights_projection"),
    "bias_desc": (dnnl.ARG_BIAS, "ldgo", "bias"),
    "dst_layer_desc": (dnnl.ARG_DST_LAYER, "tnc", "dst_layer"),
    "dst_iter_desc": (dnnl.ARG_DST_ITER, "ldnc", "dst_iter"),
    "dst_iter_c_desc": (dnnl.ARG_DST_ITER_C, "ldnc", "dst_iter_c"),
}
FWD_INPUTS = ("src_layer_desc", "src_iter_desc", "src_iter_c_desc", "attention_desc",
              "weights_layer_desc", "weights_iter_desc", "weights_peephole_desc",
              "weights_projection_desc", "bias_desc")
FWD_OUTPUTS = ("dst_layer_desc", "dst_iter_desc", "dst_iter_c_desc")

# diff desc name -> (execution argument, the reference's gradient name / diff_dst array name)
DIFF = {
    "diff_src_layer_desc": (dnnl.ARG_DIFF_SRC_LAYER, "diff_src_layer"),
    "diff_src_iter_desc": (dnnl.ARG_DIFF_SRC_ITER, "diff_src_iter"),
    "diff_src_iter_c_desc": (dnnl.ARG_DIFF_SRC_ITER_C, "diff_src_iter_c"),
    "diff_attention_desc": (dnnl.ARG_DIFF_AUGRU_ATTENTION, "diff_attention"),
    "diff_weights_layer_desc": (dnnl.ARG_DIFF_WEIGHTS_LAYER, "diff_weights_layer"),
    "diff_weights_iter_desc": (dnnl.ARG_DIFF_WEIGHTS_ITER, "diff_weights_iter"),
    "diff_weights_peephole_desc": (dnnl.ARG_DIFF_WEIGHTS_PEEPHOLE, "diff_weights_peephole"),
    "diff_weights_projection_desc": (dnnl.ARG_DIFF_WEIGHTS_PROJECTION, "diff_weights_projection"),
    "diff_bias_desc": (dnnl.ARG_DIFF_BIAS, "diff_bias"),
    "diff_dst_layer_desc": (dnnl.ARG_DIFF_DST_LAYER, "diff_dst_layer"),
    "diff_dst_iter_desc": (dnnl.ARG_DIFF_DST_ITER, "diff_dst_iter"),
    "diff_dst_iter_c_desc": (dnnl.ARG_DIFF_DST_ITER_C, "diff_dst_iter_c"),
}
DIFF_OUTPUTS = ("diff_src_layer_desc", "diff_src_iter_desc", "diff_src_iter_c_desc",
                "diff_attention_desc", "diff_weights_layer_desc", "diff_weights_iter_desc",
                "diff_weights_peephole_desc", "diff_weights_projection_desc", "diff_bias_desc")
DIFF_INPUTS = ("diff_dst_layer_desc", "diff_dst_iter_desc", "diff_dst_iter_c_desc")
DIFF_WEIGHTS = ("diff_weights_layer_desc", "diff_weights_iter_desc",
                "diff_weights_peephole_desc", "diff_weights_projection_desc", "diff_bias_desc")
# gradient name -> the input it differentiates (reference array name)
GRAD_OF = {"diff_src_layer": "src_layer", "diff_src_iter": "src_iter",
           "diff_src_iter_c": "src_iter_c", "diff_attention": "attention",
           "diff_weights_layer": "weights_layer", "diff_weights_iter": "weights_iter",
           "diff_weights_peephole": "weights_peephole",
           "diff_weights_projection": "weights_projection", "diff_bias": "bias"}

# oneDNN's positional descriptor orders of the forward primitives
_GRU_SIG = ("src_layer_desc", "src_iter_desc", "weights_layer_desc", "weights_iter_desc",
            "bias_desc", "dst_layer_desc", "dst_iter_desc")
_AUGRU_SIG = ("src_layer_desc", "src_iter_desc", "attention_desc", "weights_layer_desc",
              "weights_iter_desc", "bias_desc", "dst_layer_desc", "dst_iter_desc")
_LSTM_SIGS = {
    (False, False): ("src_layer_desc", "src_iter_desc", "src_iter_c_desc", "weights_layer_desc",
                     "weights_iter_desc", "bias_desc", "dst_layer_desc", "dst_iter_desc",
                     "dst_iter_c_desc"),
    (True, False): ("src_layer_desc", "src_iter_desc", "src_iter_c_desc", "weights_layer_desc",
                    "weights_iter_desc", "weights_peephole_desc", "bias_desc", "dst_layer_desc",
                    "dst_iter_desc", "dst_iter_c_desc"),
    (True, True): ("src_layer_desc", "src_iter_desc", "src_iter_c_desc", "weights_layer_desc",
                   "weights_iter_desc", "weights_peephole_desc", "weights_projection_desc",
                   "bias_desc", "dst_layer_desc", "dst_iter_desc", "dst_iter_c_desc"),
}
_LSTM_SIGS[(False, True)] = _LSTM_SIGS[(True, True)]  # projection only: zero peephole desc


def fwd_signature(c: Cell) -> tuple[str, ...]:
    if c.fwd == "lstm_forward":
        return _LSTM_SIGS[(c.peephole, c.projection)]
    return _AUGRU_SIG if c.augru else _GRU_SIG


def bwd_signature(c: Cell) -> tuple[str, ...]:
    """oneDNN's backward order: the forward descs, then the diff of each in the same order."""
    f = fwd_signature(c)
    return f + tuple("diff_" + n for n in f)


# --------------------------------------------------------------------------------------------
# problems
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    cfg: str
    direction: str = "unidirectional_left2right"
    L: int = 1
    T: int = 3
    N: int = 2
    SLC: int = 5
    DHC: int = 4
    DIC: int = 4
    SIC: int = 4
    with_iter: bool = True
    seed: int = 0

    @property
    def c(self) -> Cell:
        return CELLS[self.cfg]

    @property
    def D(self) -> int:
        return 2 if self.direction.startswith("bidirectional") else 1

    @property
    def DLC(self) -> int:
        return self.DIC * (2 if self.direction == "bidirectional_concat" else 1)


def problem(cfg: str, direction: str = "unidirectional_left2right", L: int = 1, *,
            with_iter: bool = True, **over) -> Problem:
    """The standard tiny problem (T = 3, N = 2, DHC = 4; DIC = 3 with projection, else DHC;
    SLC = 5 != DHC for one layer, SLC = DIC for stacks; SIC = DIC). Problems of the same cell
    family share their shapes, hence their compiled kernels."""
    c = CELLS[cfg]
    dhc = over.pop("DHC", 4)
    dic = over.pop("DIC", 3 if c.projection else dhc)
    slc = over.pop("SLC", 5 if L == 1 else dic)
    sic = over.pop("SIC", dic)
    return Problem(cfg, direction, L, SLC=slc, DHC=dhc, DIC=dic, SIC=sic, with_iter=with_iter,
                   **over)


def stable_seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode()) % 100000


def dims_of(p: Problem, name: str) -> list[int]:
    """Logical dims of a forward or diff desc (oneDNN's shapes)."""
    c = p.c
    name = name[5:] if name.startswith("diff_") else name
    return {
        "src_layer_desc": [p.T, p.N, p.SLC],
        "src_iter_desc": [p.L, p.D, p.N, p.SIC],
        "src_iter_c_desc": [p.L, p.D, p.N, p.DHC],
        "attention_desc": [p.T, p.N, 1],
        "weights_layer_desc": [p.L, p.D, p.SLC, c.gates, p.DHC],
        "weights_iter_desc": [p.L, p.D, p.SIC, c.gates, p.DHC],
        "weights_peephole_desc": [p.L, p.D, 3, p.DHC],
        "weights_projection_desc": [p.L, p.D, p.DHC, p.DIC],
        "bias_desc": [p.L, p.D, c.bias_gates, p.DHC],
        "dst_layer_desc": [p.T, p.N, p.DLC],
        "dst_iter_desc": [p.L, p.D, p.N, p.DIC],
        "dst_iter_c_desc": [p.L, p.D, p.N, p.DHC],
    }[name]


def fwd_present(p: Problem) -> list[str]:
    """Forward descs the problem passes: with_iter gives every state tensor (in and out)."""
    c = p.c
    out = ["src_layer_desc", "weights_layer_desc", "weights_iter_desc", "bias_desc",
           "dst_layer_desc"]
    if p.with_iter:
        out += ["src_iter_desc", "dst_iter_desc"]
        if c.has_c:
            out += ["src_iter_c_desc", "dst_iter_c_desc"]
    if c.augru:
        out.append("attention_desc")
    if c.peephole:
        out.append("weights_peephole_desc")
    if c.projection:
        out.append("weights_projection_desc")
    return out


_ARRAYS: dict = {}


def arrays(p: Problem) -> dict[str, np.ndarray | None]:
    """Random f32 inputs and output gradients of ``p`` in oneDNN's logical shapes (None = not
    given). The output gradients R1, R2, R3 define the loss sum(dst_layer R1) + sum(dst_iter R2)
    + sum(dst_iter_c R3) whose gradients the backward pass computes."""
    if p in _ARRAYS:
        return _ARRAYS[p]
    c = p.c
    rng = np.random.default_rng(stable_seed(p))

    def rnd(*shape, s=0.4):
        return (rng.standard_normal(shape) * s).astype(np.float32)

    a = {
        "src_layer": rnd(p.T, p.N, p.SLC, s=1.0),
        "weights_layer": rnd(p.L, p.D, p.SLC, c.gates, p.DHC, s=0.5),
        "weights_iter": rnd(p.L, p.D, p.SIC, c.gates, p.DHC, s=0.5),
        "bias": rnd(p.L, p.D, c.bias_gates, p.DHC),
        "src_iter": rnd(p.L, p.D, p.N, p.SIC, s=1.0) if p.with_iter else None,
        "src_iter_c": rnd(p.L, p.D, p.N, p.DHC, s=1.0) if p.with_iter and c.has_c else None,
        "weights_peephole": rnd(p.L, p.D, 3, p.DHC, s=0.5) if c.peephole else None,
        "weights_projection": rnd(p.L, p.D, p.DHC, p.DIC, s=0.6) if c.projection else None,
        "attention": rng.random((p.T, p.N, 1)).astype(np.float32) if c.augru else None,
        "diff_dst_layer": rnd(p.T, p.N, p.DLC, s=1.0),
        "diff_dst_iter": rnd(p.L, p.D, p.N, p.DIC, s=1.0) if p.with_iter else None,
        "diff_dst_iter_c": rnd(p.L, p.D, p.N, p.DHC, s=1.0) if p.with_iter and c.has_c else None,
    }
    for v in a.values():
        if v is not None:
            v.setflags(write=False)
    _ARRAYS[p] = a
    return a


# --------------------------------------------------------------------------------------------
# the float64 reference
# --------------------------------------------------------------------------------------------
def ref_forward(p: Problem, a: dict, dtype=np.float64):
    c = p.c
    return rnn_forward(c.cell, a["src_layer"], a["src_iter"], a["src_iter_c"],
                       a["weights_layer"], a["weights_iter"], a["bias"], direction=p.direction,
                       activation=c.act or "tanh", alpha=c.alpha,
                       weights_peephole=a["weights_peephole"],
                       weights_projection=a["weights_projection"], attention=a["attention"],
                       dtype=dtype)


_REF: dict = {}


def ref_gradients(p: Problem, *, ddi=True, ddic=True) -> dict[str, np.ndarray | None]:
    """rnn_backward of ``arrays(p)`` in float64; ``ddi``/``ddic`` False: that output gradient
    is zero (None)."""
    key = (p, ddi, ddic)
    if key not in _REF:
        a = arrays(p)
        *_, cache = ref_forward(p, a)
        _REF[key] = rnn_backward(p.c.cell, cache, a["diff_dst_layer"],
                                 a["diff_dst_iter"] if ddi else None,
                                 a["diff_dst_iter_c"] if ddic else None)
    return _REF[key]


def loss64(p: Problem, a: dict) -> float:
    """The scalar loss whose gradients backward computes, evaluated with the float64
    reference forward on (possibly perturbed) inputs ``a``."""
    dl, di, dc, _ = ref_forward(p, a)
    base = arrays(p)
    out = float(np.sum(dl * base["diff_dst_layer"]))
    if base["diff_dst_iter"] is not None:
        out += float(np.sum(di * base["diff_dst_iter"]))
    if base["diff_dst_iter_c"] is not None:
        out += float(np.sum(dc * base["diff_dst_iter_c"]))
    return out


# Finite differences. The loss is evaluated entirely in float64, so the central difference
# (L(x + eps v) - L(x - eps v)) / (2 eps) with eps = 1e-5 has a truncation error of order
# eps^2 |L'''| ~ 1e-10 and a rounding error of order 1e-16 |L| / eps ~ 1e-10 for these tiny,
# O(1)-valued problems: it is exact to far below what an f32 primitive can reach.
FD_EPS = 1e-5
# The primitive's gradients are f32: each element carries an absolute error of at most about
# 1e-5 of the tensor's largest magnitude (the criterion of the analytic comparison; measured
# errors are ~1e-7). The directional derivative sum_i g_i v_i therefore differs from the exact
# one by at most 1e-5 * max|g| * sum|v_i| (triangle inequality); FD_ABS covers the float64
# finite difference itself. A single gradient element wrong by 1% of max|g| with |v_i| ~ 1
# exceeds this bound for the problem sizes used (sum|v_i| <= a few hundred); the test
# test_fd_oracle_rejects_wrong_gradients shows it.
FD_REL = 1e-5
FD_ABS = 1e-7


def fd_directional(p: Problem, name: str, v: np.ndarray) -> float:
    """Central difference of loss64 along ``v`` for input ``name`` (reference array name)."""
    base = arrays(p)
    x0 = base[name].astype(np.float64)
    plus = {k: (None if x is None else x.astype(np.float64)) for k, x in base.items()}
    minus = dict(plus)
    plus[name] = x0 + FD_EPS * v
    minus[name] = x0 - FD_EPS * v
    return (loss64(p, plus) - loss64(p, minus)) / (2 * FD_EPS)


def fd_check(p: Problem, grads: dict, ndirs: int = 2) -> list[str]:
    """Compare the directional derivatives of the given gradients (reference names ->
    arrays, e.g. the primitive's) with finite differences; return the failures."""
    bad = []
    rng = np.random.default_rng(stable_seed("fd", p))
    for gname, g in grads.items():
        x = arrays(p)[GRAD_OF[gname]]
        if x is None or g is None:
            continue
        g = np.asarray(g, np.float64).reshape(x.shape)
        for k in range(ndirs):
            v = rng.standard_normal(x.shape)
            fd = fd_directional(p, GRAD_OF[gname], v)
            dd = float(np.sum(g * v))
            tol = FD_REL * float(np.abs(g).max()) * float(np.abs(v).sum()) + FD_ABS * (1 + abs(fd))
            if not abs(dd - fd) <= tol:
                bad.append(f"{gname} dir {k}: primitive {dd:.9g} vs finite difference "
                           f"{fd:.9g} (|diff| {abs(dd - fd):.3g} > tol {tol:.3g})")
    return bad


def assert_close(got, want, what: str = "") -> None:
    """The f32 criterion: |got - want| <= 1e-5 * max|want| elementwise."""
    assert got is not None, f"{what}: missing"
    want = np.asarray(want, np.float64)
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    scale = float(np.abs(want).max()) if want.size else 0.0
    err = float(np.abs(got - want).max()) if want.size else 0.0
    assert np.all(np.isfinite(got)), f"{what}: non-finite values"
    assert err <= 1e-5 * scale, f"{what}: max |diff| {err:.3g} > 1e-5 * max|ref| ({scale:.3g})"


# --------------------------------------------------------------------------------------------
# descs and pds
# --------------------------------------------------------------------------------------------
def md(dims, t, dtype=F32) -> dnnl.memory.desc:
    return dnnl.memory.desc(list(dims), dtype, t)


def fwd_descs(p: Problem, tags: dict | None = None) -> dict:
    """{forward desc name: desc or None}; ``tags`` overrides a tag or gives a ready desc."""
    tags = tags or {}
    names = fwd_present(p)
    out = {}
    for n in FWD:
        if n not in names:
            out[n] = None
            continue
        t = tags.get(n, FWD[n][1])
        out[n] = t if isinstance(t, dnnl.memory.desc) else md(dims_of(p, n), t)
    return out


def diff_descs(p: Problem, tags: dict | None = None, *, omit=()) -> dict:
    """{diff desc name: desc or None}, mirroring the forward descs the problem passes
    (``omit``: diff names to pass as None); tags default to the forward's plain tags."""
    tags = tags or {}
    names = fwd_present(p)
    out = {}
    for n in FWD:
        dn = "diff_" + n
        if n not in names or dn in omit:
            out[dn] = None
            continue
        t = tags.get(dn, FWD[n][1])
        out[dn] = t if isinstance(t, dnnl.memory.desc) else md(dims_of(p, n), t)
    return out


def head(engine, c: Cell, prop) -> tuple:
    h = (engine, prop)
    if c.act:
        h += (ACT_ALG[c.act],)
    return h


def fwd_pd(engine, p: Problem, descs: dict | None = None, prop=dnnl.prop_kind.forward_training):
    c = p.c
    descs = descs if descs is not None else fwd_descs(p)
    extra = {"alpha": c.alpha} if c.act else {}
    return c.fwd_cls.primitive_desc(*head(engine, c, prop),
                                    getattr(dnnl.rnn_direction, p.direction),
                                    *[descs[n] for n in fwd_signature(c)], **extra)


def bwd_pd(engine, p: Problem, hint, fdescs: dict | None = None, ddescs: dict | None = None,
           *, flags=OVERWRITE, mode: str = "positional", prop=dnnl.prop_kind.backward):
    """The backward pd in oneDNN's positional order (forward descs, diff descs, hint_fwd_pd,
    attr) or with every desc by keyword. ``flags=None`` leaves the flags out (oneDNN's
    default: accumulate into the diff weights)."""
    c = p.c
    fdescs = fdescs if fdescs is not None else fwd_descs(p)
    ddescs = ddescs if ddescs is not None else diff_descs(p)
    alld = {**fdescs, **ddescs}
    extra = {"alpha": c.alpha} if c.act else {}
    if flags is not None:
        extra["flags"] = flags
    h = head(engine, c, prop) + (getattr(dnnl.rnn_direction, p.direction),)
    if mode == "positional":
        return c.bwd_cls.primitive_desc(*h, *[alld[n] for n in bwd_signature(c)], hint, None,
                                        **extra)
    kw = {n: v for n, v in alld.items() if v is not None}
    return c.bwd_cls.primitive_desc(*h, **kw, hint_fwd_pd=hint, **extra)


# --------------------------------------------------------------------------------------------
# execution
# --------------------------------------------------------------------------------------------
def run_forward(engine, stream, p: Problem, fpd, fprim=None) -> dict[int, dnnl.memory]:
    """forward_training on ``arrays(p)``; the argument map (inputs, outputs, workspace)."""
    a = arrays(p)
    args = {}
    for n in FWD_INPUTS:
        d = getattr(fpd, n)()
        if not d.is_zero():
            args[FWD[n][0]] = dnnl.memory(d, engine, a[FWD[n][2]])
    for n in FWD_OUTPUTS:
        d = getattr(fpd, n)()
        if not d.is_zero():
            args[FWD[n][0]] = dnnl.memory(d, engine)
    args[dnnl.ARG_WORKSPACE] = dnnl.memory(fpd.workspace_desc(), engine)
    (fprim or p.c.fwd_cls(fpd)).execute(stream, args)
    return args


def expected_outputs(p) -> set[str]:
    """The gradient names backward must produce for problem ``p`` (test-side list)."""
    c = p.c
    out = {"diff_src_layer", "diff_weights_layer", "diff_weights_iter", "diff_bias"}
    if p.with_iter:
        out.add("diff_src_iter")
        if c.has_c:
            out.add("diff_src_iter_c")
    if c.peephole:
        out.add("diff_weights_peephole")
    if c.projection:
        out.add("diff_weights_projection")
    if c.augru:
        out.add("diff_attention")
    return out


SENTINEL = 7.25


def diff_memories(engine, p: Problem, bpd, *, prefill=None, ddi=True, ddic=True):
    """(diff_dst input memories, diff output memories by diff desc name). Outputs are filled
    with ``prefill[name]`` (a logical array) or the sentinel."""
    a = arrays(p)
    prefill = prefill or {}
    ins = {}
    for n in DIFF_INPUTS:
        d = getattr(bpd, n)()
        if d.is_zero():
            continue
        if (n == "diff_dst_iter_desc" and not ddi) or (n == "diff_dst_iter_c_desc" and not ddic):
            continue
        ins[DIFF[n][0]] = dnnl.memory(d, engine, a[DIFF[n][1]])
    outs = {}
    for n in DIFF_OUTPUTS:
        d = getattr(bpd, n)()
        if d.is_zero():
            continue
        fill = prefill.get(n)
        outs[n] = dnnl.memory(d, engine, fill if fill is not None else
                              np.full(d.get_dims(), SENTINEL, np.float32))
    return ins, outs


def run_backward(engine, stream, p: Problem, bpd, fargs, *, bprim=None, prefill=None,
                 outs=None, ddi=True, ddic=True) -> dict[str, dnnl.memory]:
    """Execute backward after the forward whose argument map is ``fargs``; returns the diff
    output memories by diff desc name (created here unless ``outs`` is given)."""
    ins, new_outs = diff_memories(engine, p, bpd, prefill=prefill, ddi=ddi, ddic=ddic)
    outs = outs if outs is not None else new_outs
    args = {}
    for n in FWD_INPUTS + FWD_OUTPUTS:
        d = getattr(bpd, n)()
        if not d.is_zero():
            args[FWD[n][0]] = fargs[FWD[n][0]]
    args[dnnl.ARG_WORKSPACE] = fargs[dnnl.ARG_WORKSPACE]
    args.update(ins)
    for n, m in outs.items():
        args[DIFF[n][0]] = m
    (bprim or p.c.bwd_cls(bpd)).execute(stream, args)
    stream.wait()
    return outs


def gradients(outs: dict[str, dnnl.memory]) -> dict[str, np.ndarray]:
    """Logical numpy arrays of the diff outputs, keyed by the reference's gradient names."""
    return {DIFF[n][1]: m.to_numpy() for n, m in outs.items()}


def write_raw(m: dnnl.memory, flat: np.ndarray) -> None:
    """Write the device bytes of ``m`` directly (bypassing the library's packing)."""
    import pyopencl as cl

    flat = np.ascontiguousarray(flat, np.float32)
    assert flat.size * 4 == m.get_desc().get_size(), (flat.size, m.get_desc())
    cl.enqueue_copy(m.get_engine().default_queue, m.buffer, flat, is_blocking=True)


def read_raw(m: dnnl.memory) -> np.ndarray:
    import pyopencl as cl

    host = np.empty(m.get_desc().get_size() // 4, np.float32)
    cl.enqueue_copy(m.get_engine().default_queue, host, m.buffer, is_blocking=True)
    return host


# oneDNN's plain tags as axis permutations of the logical dims (physical order of the axes)
PERM = {"tnc": (0, 1, 2), "ntc": (1, 0, 2), "ldnc": (0, 1, 2, 3), "ldgo": (0, 1, 2, 3),
        "ldigo": (0, 1, 2, 3, 4), "ldgoi": (0, 1, 3, 4, 2), "ldio": (0, 1, 2, 3),
        "ldoi": (0, 1, 3, 2)}


def pack(t: str, logical: np.ndarray) -> np.ndarray:
    """The dense storage of ``logical`` in plain tag ``t`` (test-side, from the tag's letters)."""
    return np.ascontiguousarray(np.transpose(logical, PERM[t])).ravel()


def unpack(t: str, flat: np.ndarray, dims) -> np.ndarray:
    perm = PERM[t]
    return flat.reshape([dims[i] for i in perm]).transpose(np.argsort(perm))
