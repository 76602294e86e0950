"""Shared helpers of the RNN forward primitive tests: problem generation, desc building,
construction of the pds (positional, keyword), execution and the comparison criterion.

Everything here is test-side: shapes and tags are spelled out from oneDNN's documentation
(oneDNN's RNN guide and dnnl_types.h), not taken from the library under test.
"""
from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass, replace

import numpy as np

import pydnnl as dnnl
from pydnnl.reference.rnn import rnn_forward

dt = dnnl.memory.data_type
tag = dnnl.memory.format_tag
F32 = dt.f32

DIRECTIONS = ("unidirectional_left2right", "unidirectional_right2left",
              "bidirectional_concat", "bidirectional_sum")
PROPS = ("forward_inference", "forward_training")


@dataclass(frozen=True)
class CellConfig:
    """One cell kind as the tests see it: the primitive class and the reference's cell name."""

    name: str
    cls: str
    cell: str
    act: str | None = None          # vanilla RNN activation: relu / tanh / logistic
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
    def prim(self):
        return getattr(dnnl, self.cls)


CONFIGS = {c.name: c for c in (
    CellConfig("rnn_relu", "vanilla_rnn_forward", "vanilla_rnn", act="relu", alpha=0.1),
    CellConfig("rnn_tanh", "vanilla_rnn_forward", "vanilla_rnn", act="tanh"),
    CellConfig("rnn_logistic", "vanilla_rnn_forward", "vanilla_rnn", act="logistic"),
    CellConfig("lstm", "lstm_forward", "vanilla_lstm"),
    CellConfig("lstm_peephole", "lstm_forward", "vanilla_lstm", peephole=True),
    CellConfig("lstm_projection", "lstm_forward", "vanilla_lstm", projection=True),
    CellConfig("lstm_peephole_projection", "lstm_forward", "vanilla_lstm", peephole=True,
               projection=True),
    CellConfig("gru", "gru_forward", "vanilla_gru"),
    CellConfig("lbr_gru", "lbr_gru_forward", "lbr_gru"),
    CellConfig("augru", "augru_forward", "vanilla_augru"),
    CellConfig("lbr_augru", "lbr_augru_forward", "lbr_augru"),
)}
NON_AUGRU = [k for k, c in CONFIGS.items() if not c.augru]
AUGRU = [k for k, c in CONFIGS.items() if c.augru]

# the activation enum of each vanilla RNN activation name
ACT_ALG = {"relu": dnnl.algorithm.eltwise_relu, "tanh": dnnl.algorithm.eltwise_tanh,
           "logistic": dnnl.algorithm.eltwise_logistic}

# descriptor name -> (execution argument, oneDNN's canonical plain tag)
DESCS = {
    "src_layer_desc": (dnnl.ARG_SRC_LAYER, "tnc"),
    "src_iter_desc": (dnnl.ARG_SRC_ITER, "ldnc"),
    "src_iter_c_desc": (dnnl.ARG_SRC_ITER_C, "ldnc"),
    "attention_desc": (dnnl.ARG_AUGRU_ATTENTION, "tnc"),
    "weights_layer_desc": (dnnl.ARG_WEIGHTS_LAYER, "ldigo"),
    "weights_iter_desc": (dnnl.ARG_WEIGHTS_ITER, "ldigo"),
    "weights_peephole_desc": (dnnl.ARG_WEIGHTS_PEEPHOLE, "ldgo"),
    "weights_projection_desc": (dnnl.ARG_WEIGHTS_PROJECTION, "ldio"),
    "bias_desc": (dnnl.ARG_BIAS, "ldgo"),
    "dst_layer_desc": (dnnl.ARG_DST_LAYER, "tnc"),
    "dst_iter_desc": (dnnl.ARG_DST_ITER, "ldnc"),
    "dst_iter_c_desc": (dnnl.ARG_DST_ITER_C, "ldnc"),
}
INPUTS = ("src_layer_desc", "src_iter_desc", "src_iter_c_desc", "attention_desc",
          "weights_layer_desc", "weights_iter_desc", "weights_peephole_desc",
          "weights_projection_desc", "bias_desc")
OUTPUTS = ("dst_layer_desc", "dst_iter_desc", "dst_iter_c_desc")
# descriptor name -> key of the numpy arrays (and of rnn_forward's keyword arguments)
ARRAY_OF = {"src_layer_desc": "src_layer", "src_iter_desc": "src_iter",
            "src_iter_c_desc": "src_iter_c", "attention_desc": "attention",
            "weights_layer_desc": "weights_layer", "weights_iter_desc": "weights_iter",
            "weights_peephole_desc": "weights_peephole",
            "weights_projection_desc": "weights_projection", "bias_desc": "bias",
            "dst_layer_desc": "dst_layer", "dst_iter_desc": "dst_iter",
            "dst_iter_c_desc": "dst_iter_c"}


# --------------------------------------------------------------------------------------------
# problems
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    """Sizes of one test problem (oneDNN's letters). SIC defaults to DIC."""

    cfg: str
    direction: str = "unidirectional_left2right"
    L: int = 1
    T: int = 3
    N: int = 2
    SLC: int = 5
    DHC: int = 6
    DIC: int = 6
    SIC: int = 6
    with_iter: bool = True
    seed: int = 0
    # which optional outputs to request
    want_dst_iter: bool = True
    want_dst_iter_c: bool = True

    @property
    def c(self) -> CellConfig:
        return CONFIGS[self.cfg]

    @property
    def D(self) -> int:
        return 2 if self.direction.startswith("bidirectional") else 1

    @property
    def DLC(self) -> int:
        return self.DIC * (2 if self.direction == "bidirectional_concat" else 1)


def problem(cfg: str, direction: str = "unidirectional_left2right", L: int = 1, *,
            with_iter: bool = True, T: int = 3, N: int = 2, **over) -> Problem:
    """The standard tiny problem of the tests: DHC = 6, DIC = 4 with projection (else 6),
    SLC = 5 for one layer (SLC != DHC) and SLC = DIC for stacks, SIC = DIC."""
    c = CONFIGS[cfg]
    dhc = over.pop("DHC", 6)
    dic = over.pop("DIC", 4 if c.projection else dhc)
    slc = over.pop("SLC", 5 if L == 1 else dic)
    sic = over.pop("SIC", dic)
    return Problem(cfg, direction, L, T, N, slc, dhc, dic, sic, with_iter, **over)


def stable_seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode()) % 100000


@functools.lru_cache(maxsize=None)
def arrays(p: Problem) -> dict[str, np.ndarray | None]:
    """Random f32 inputs of problem ``p`` in oneDNN's logical shapes (None = not given)."""
    c = p.c
    rng = np.random.default_rng(stable_seed(replace(p, want_dst_iter=True, want_dst_iter_c=True)))

    def rnd(*shape, s=0.4):
        return (rng.standard_normal(shape) * s).astype(np.float32)

    a = {
        "src_layer": rnd(p.T, p.N, p.SLC, s=1.0),
        "weights_layer": rnd(p.L, p.D, p.SLC, c.gates, p.DHC),
        "weights_iter": rnd(p.L, p.D, p.SIC, c.gates, p.DHC),
        "bias": rnd(p.L, p.D, c.bias_gates, p.DHC),
        "src_iter": rnd(p.L, p.D, p.N, p.SIC, s=1.0) if p.with_iter else None,
        "src_iter_c": rnd(p.L, p.D, p.N, p.DHC, s=1.0) if p.with_iter and c.has_c else None,
        "weights_peephole": rnd(p.L, p.D, 3, p.DHC) if c.peephole else None,
        "weights_projection": rnd(p.L, p.D, p.DHC, p.DIC, s=0.5) if c.projection else None,
        "attention": rng.random((p.T, p.N, 1)).astype(np.float32) if c.augru else None,
    }
    for v in a.values():
        if v is not None:
            v.setflags(write=False)
    return a


@functools.lru_cache(maxsize=None)
def reference(p: Problem) -> dict[str, np.ndarray | None]:
    """rnn_forward of ``arrays(p)`` computed in float64."""
    c, a = p.c, arrays(p)
    dl, di, dc, _ = rnn_forward(
        c.cell, a["src_layer"], a["src_iter"], a["src_iter_c"], a["weights_layer"],
        a["weights_iter"], a["bias"], direction=p.direction, activation=c.act or "tanh",
        alpha=c.alpha, weights_peephole=a["weights_peephole"],
        weights_projection=a["weights_projection"], attention=a["attention"], dtype=np.float64)
    return {"dst_layer": dl, "dst_iter": di, "dst_iter_c": dc}


def dims_of(p: Problem, name: str) -> list[int]:
    """The logical dims of descriptor ``name`` in problem ``p``."""
    c = p.c
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


def present(p: Problem) -> list[str]:
    """The descriptor names problem ``p`` passes (non-None)."""
    c = p.c
    out = ["src_layer_desc", "weights_layer_desc", "weights_iter_desc", "bias_desc",
           "dst_layer_desc"]
    if p.with_iter:
        out.append("src_iter_desc")
        if c.has_c:
            out.append("src_iter_c_desc")
    if c.augru:
        out.append("attention_desc")
    if c.peephole:
        out.append("weights_peephole_desc")
    if c.projection:
        out.append("weights_projection_desc")
    if p.want_dst_iter:
        out.append("dst_iter_desc")
    if c.has_c and p.want_dst_iter_c:
        out.append("dst_iter_c_desc")
    return out


def make_descs(p: Problem, tags: dict | None = None, default="canonical") -> dict:
    """Memory descs of problem ``p``: ``{name: desc or None}`` for every name the cell takes.

    ``tags`` overrides the tag (or gives a ready desc) per name; ``default`` is
    ``"canonical"`` (oneDNN's plain tags) or ``"any"``.
    """
    tags = tags or {}
    out: dict = {}
    names = present(p)
    for name in DESCS:
        if name not in names:
            out[name] = None
            continue
        t = tags.get(name, tag.any if default == "any" else DESCS[name][1])
        out[name] = (t if isinstance(t, dnnl.memory.desc)
                     else dnnl.memory.desc(dims_of(p, name), F32, t))
    return out


# --------------------------------------------------------------------------------------------
# pd construction
# --------------------------------------------------------------------------------------------
_SIGS = {
    "vanilla_rnn_forward": ("src_layer_desc", "src_iter_desc", "weights_layer_desc",
                            "weights_iter_desc", "bias_desc", "dst_layer_desc", "dst_iter_desc"),
    "gru_forward": ("src_layer_desc", "src_iter_desc", "weights_layer_desc", "weights_iter_desc",
                    "bias_desc", "dst_layer_desc", "dst_iter_desc"),
    "augru_forward": ("src_layer_desc", "src_iter_desc", "attention_desc", "weights_layer_desc",
                      "weights_iter_desc", "bias_desc", "dst_layer_desc", "dst_iter_desc"),
}
_SIGS["lbr_gru_forward"] = _SIGS["gru_forward"]
_SIGS["lbr_augru_forward"] = _SIGS["augru_forward"]
LSTM_SIGS = {
    9: ("src_layer_desc", "src_iter_desc", "src_iter_c_desc", "weights_layer_desc",
        "weights_iter_desc", "bias_desc", "dst_layer_desc", "dst_iter_desc", "dst_iter_c_desc"),
    10: ("src_layer_desc", "src_iter_desc", "src_iter_c_desc", "weights_layer_desc",
         "weights_iter_desc", "weights_peephole_desc", "bias_desc", "dst_layer_desc",
         "dst_iter_desc", "dst_iter_c_desc"),
    11: ("src_layer_desc", "src_iter_desc", "src_iter_c_desc", "weights_layer_desc",
         "weights_iter_desc", "weights_peephole_desc", "weights_projection_desc", "bias_desc",
         "dst_layer_desc", "dst_iter_desc", "dst_iter_c_desc"),
}


def signature(p: Problem, lstm_overload: int | None = None) -> tuple[str, ...]:
    """oneDNN's positional descriptor order for the problem's primitive (LSTM: the shortest
    overload that holds the problem's optional weights, unless ``lstm_overload`` says)."""
    c = p.c
    if c.cls != "lstm_forward":
        return _SIGS[c.cls]
    if lstm_overload is None:
        lstm_overload = 11 if c.projection else 10 if c.peephole else 9
    return LSTM_SIGS[lstm_overload]


def head(engine, p: Problem, prop: str) -> tuple:
    """(engine, prop_kind, [activation,] direction) positionally."""
    c = p.c
    h = (engine, getattr(dnnl.prop_kind, prop))
    if c.act:
        h += (ACT_ALG[c.act],)
    return h + (getattr(dnnl.rnn_direction, p.direction),)


def make_pd(engine, p: Problem, prop: str, descs: dict, *, mode: str = "positional",
            lstm_overload: int | None = None):
    """The primitive descriptor of ``p`` with ``descs`` passed positionally (oneDNN's order)
    or by keyword (oneDNN's parameter names)."""
    c = p.c
    extra = {"alpha": c.alpha} if c.act else {}
    if mode == "positional":
        pos = [descs.get(n) for n in signature(p, lstm_overload)]
        return c.prim.primitive_desc(*head(engine, p, prop), *pos, **extra)
    kw = {n: v for n, v in descs.items() if v is not None}
    return c.prim.primitive_desc(*head(engine, p, prop), **kw, **extra)


# --------------------------------------------------------------------------------------------
# execution
# --------------------------------------------------------------------------------------------
QUERY = {n: n for n in DESCS}  # the pd query method of each descriptor (same names)


def input_memories(engine, p: Problem, pd, *, skip=()) -> dict[int, dnnl.memory]:
    """Memories of every input the pd takes, in the layouts the pd reports, holding
    ``arrays(p)`` (packed by memory's host-side layout code)."""
    a = arrays(p)
    args = {}
    for name in INPUTS:
        md = getattr(pd, name)()
        if md.is_zero() or name in skip:
            continue
        args[DESCS[name][0]] = dnnl.memory(md, engine, a[ARRAY_OF[name]])
    return args


def output_memories(engine, pd, sentinel=np.nan) -> dict[str, dnnl.memory]:
    """Memories of every output the pd writes, filled with ``sentinel``."""
    out = {}
    for name in OUTPUTS:
        md = getattr(pd, name)()
        if md.is_zero():
            continue
        m = dnnl.memory(md, engine)
        m.write(np.full(md.get_dims(), sentinel, np.float32))
        out[name] = m
    return out


def execute(engine, stream, p: Problem, pd, *, prim=None, inputs=None) -> dict[str, np.ndarray]:
    """Run pd's primitive on ``arrays(p)``; the outputs as logical numpy arrays keyed by the
    reference's names (``dst_layer``, ``dst_iter``, ``dst_iter_c``)."""
    prim = prim or p.c.prim(pd)
    args = dict(inputs) if inputs is not None else input_memories(engine, p, pd)
    outs = output_memories(engine, pd)
    for name, m in outs.items():
        args[DESCS[name][0]] = m
    if not pd.workspace_desc().is_zero():
        args[dnnl.ARG_WORKSPACE] = dnnl.memory(pd.workspace_desc(), engine)
    prim.execute(stream, args)
    stream.wait()
    return {ARRAY_OF[n]: m.to_numpy() for n, m in outs.items()}


def assert_close(got, want, what: str = "") -> None:
    """The f32 criterion of the tests: 1e-5 relative to the tensor's magnitude."""
    want = np.asarray(want)
    assert got is not None, f"{what}: missing"
    assert np.asarray(got).shape == want.shape, f"{what}: shape {np.shape(got)} != {want.shape}"
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale, err_msg=what)


def check_outputs(p: Problem, out: dict, ref: dict | None = None, what: str = "") -> None:
    """Every requested output of ``p`` against the reference."""
    ref = ref or reference(p)
    assert_close(out["dst_layer"], ref["dst_layer"], f"{what} dst_layer")
    if p.want_dst_iter:
        assert_close(out["dst_iter"], ref["dst_iter"], f"{what} dst_iter")
    else:
        assert "dst_iter" not in out
    if p.c.has_c and p.want_dst_iter_c:
        assert_close(out["dst_iter_c"], ref["dst_iter_c"], f"{what} dst_iter_c")
    else:
        assert "dst_iter_c" not in out


def all_engines() -> list[dnnl.engine]:
    """Every device the ``engine`` fixture iterates over (CPU devices, then GPUs)."""
    out = []
    for kind in (dnnl.engine.kind.cpu, dnnl.engine.kind.gpu):
        for i in range(dnnl.engine.get_count(kind)):
            out.append(dnnl.engine(kind, i))
    return out
