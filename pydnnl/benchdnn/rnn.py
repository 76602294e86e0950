"""benchdnn's RNN driver: problem syntax, creation, timing, correctness, peer comparison."""
from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, replace

import numpy as np

import pydnnl as dnnl

from ..cells import get_cell
from .common import FPMATH_EPS, fpmath_attr, torch_tf32

ALGS = {"VANILLA_RNN": ("vanilla_rnn", "vanilla_rnn_forward"),
        "VANILLA_LSTM": ("vanilla_lstm", "lstm_forward"),
        "VANILLA_GRU": ("vanilla_gru", "gru_forward"),
        "LBR_GRU": ("lbr_gru", "lbr_gru_forward"),
        "VANILLA_AUGRU": ("vanilla_augru", "augru_forward"),
        "LBR_AUGRU": ("lbr_augru", "lbr_augru_forward")}
DIRECTIONS = {"left2right": "unidirectional_left2right", "right2left": "unidirectional_right2left",
              "concat": "bidirectional_concat", "sum": "bidirectional_sum"}
PROPS = {"FWD_I": "forward_inference", "FWD_D": "forward_training", "BWD_DW": "backward"}
F32_EPS = 2.0 ** -23
# benchdnn's epsilon_dt of the data type a configuration's threshold uses
CFG_EPS = {"f32": F32_EPS, "bf16": 2.0 ** -7, "bf16f32": 2.0 ** -7, "f16": 2.0 ** -10,
           "f16f32": 2.0 ** -10}

# oneDNN benchdnn's --cfg names (tests/benchdnn/rnn/cfg.cpp): the data type of each tensor
# kind. Kinds: src_layer, src_iter, src_iter_c, weights (layer and iter), peephole,
# projection, bias, dst_layer, dst_iter, dst_iter_c.
_K = ("src_layer", "src_iter", "src_iter_c", "weights", "peephole", "projection", "bias",
      "dst_layer", "dst_iter", "dst_iter_c")


def _cfg(*types: str) -> dict[str, str]:
    return dict(zip(_K, types))


CFGS = {
    "f32": _cfg(*["f32"] * 10),
    "bf16": _cfg("bf16", "bf16", "bf16", "bf16", "f32", "f32", "bf16", "bf16", "bf16", "bf16"),
    "bf16f32": _cfg("bf16", "bf16", "f32", "bf16", "f32", "f32", "f32", "bf16", "bf16", "f32"),
    "f16": _cfg("f16", "f16", "f16", "f16", "f32", "f32", "f16", "f16", "f16", "f16"),
    "f16f32": _cfg("f16", "f16", "f32", "f16", "f32", "f32", "f32", "f16", "f16", "f32"),
}
# int8 names are src_iter, src_layer, dst_iter, dst_layer: s8 weights, f32 bias and c state
for _q in ("u8", "s8"):
    for _it in (_q, "f32"):
        for _dl in (_q, "f32"):
            CFGS[f"{_it}{_q}{_it}{_dl}"] = _cfg(_q, _it, "f32", "s8", "f32", "s8", "f32", _dl,
                                               _it, "f32")
# benchdnn's int8 quantization (rnn_aux.cpp, set_qparams): data generated in [0, 127] (u8,
# mean 28) or [0, 64] (s8), from reals in [-1, 1]: scale = range / 2, u8 shift = the mean;
# s8 weights in [-64, 64]: scales 64 * (1 + i / n) (n = 1 with --scaling=common)
INT8_QPARAMS = {"u8": (63.5, 28.0), "s8": (32.0, 0.0)}
INT8_DATA = {"u8": (0, 127, 28.0, 16.0), "s8": (0, 64, 8.0, 32.0)}  # min, max, mean, stddev


def int8_cfg(cfg: str) -> str | None:
    """The quantized data type of an int8 configuration (``u8``/``s8``), else None."""
    t = CFGS[cfg]["src_layer"]
    return t if t in ("u8", "s8") else None


def tolerance(p: RnnProblem, o: RnnOptions) -> float:
    """oneDNN benchdnn's f32 RNN threshold (its ``setup_cmp``): 4 * ceil(log2(accumulated
    terms * T)) * eps, doubled for backward and for bidirectional sum. ``--mode=C`` applies it
    to max |pydnnl - float64 reference| / max |reference| of each output, benchdnn's L-inf
    norm check. With ``--attr-fpmath=tf32`` (or any, bf16, f16) the same formula with that
    format's epsilon.
    """
    g = get_cell(ALGS[o.alg][0]).n_gates
    acc = 2 * g + 1  # two GEMMs and the bias per gate
    if o.alg in ("VANILLA_GRU", "VANILLA_AUGRU"):
        acc *= p.sic
    if o.prop == "BWD_DW":
        acc *= max(g * p.dhc, p.mb)
    eps = max(FPMATH_EPS[o.reduced], CFG_EPS.get(o.cfg, F32_EPS)) if o.reduced \
        else CFG_EPS.get(o.cfg, F32_EPS)
    return (4 * (2 if o.prop == "BWD_DW" else 1) * (2 if o.direction == "sum" else 1)
            * float(np.ceil(np.log2(acc * p.t))) * eps)


ACTIVATIONS = {"RELU": "eltwise_relu", "TANH": "eltwise_tanh", "LOGISTIC": "eltwise_logistic"}


@dataclass(frozen=True)
class RnnProblem:
    """One benchdnn RNN problem: ``l1t50mb64sic512slc512dhc512dic512n"name"``."""

    l: int = 1
    t: int = 1
    mb: int = 2
    sic: int = 0
    slc: int = 0
    dhc: int = 0
    dic: int = 0
    name: str = ""

    def to_str(self) -> str:
        s = f"l{self.l}t{self.t}mb{self.mb}sic{self.sic}slc{self.slc}dhc{self.dhc}dic{self.dic}"
        return s + (f'n"{self.name}"' if self.name else "")


_FIELD = re.compile(r'(mb|sic|slc|dhc|dic|l|t|n)("[^"]*"|\d+)')


def parse_problem(text: str) -> RnnProblem:
    """Parse benchdnn's descriptor; ``_`` is ignored, sic is required, others default."""
    s = text.strip()
    # underscores separate fields; inside the quoted name they are kept
    body = "".join(part if i % 2 else part.replace("_", "")
                   for i, part in enumerate(re.split(r'("[^"]*")', s)))
    vals: dict[str, object] = {}
    pos = 0
    for m in _FIELD.finditer(body):
        if m.start() != pos:
            break
        key, v = m.group(1), m.group(2)
        if key == "n":
            vals["name"] = v.strip('"')
        else:
            if not v.isdigit():
                raise ValueError(f"rnn problem {text!r}: {key} needs a number")
            vals[key] = int(v)
        pos = m.end()
    if pos != len(body):
        raise ValueError(f"rnn problem {text!r}: cannot parse from {body[pos:]!r}")
    if "sic" not in vals:
        raise ValueError(f"rnn problem {text!r}: sic is required")
    p = RnnProblem(**vals)  # type: ignore[arg-type]
    slc = p.slc or p.sic
    dhc = p.dhc or p.sic
    dic = p.dic or dhc
    return replace(p, slc=slc, dhc=dhc, dic=dic)


@dataclass
class RnnOptions:
    alg: str = "VANILLA_LSTM"
    direction: str = "left2right"
    prop: str = "FWD_I"
    activation: str = "TANH"
    with_peephole: bool = False
    with_projection: bool = False
    seq_lengths: str | None = None  # "spread" (evenly over [1, T]) or "3:5:1:..."
    fpmath: str = ""  # benchdnn's --attr-fpmath
    cfg: str = "f32"  # benchdnn's --cfg (CFGS)
    scaling: str = "common"  # int8 weights scales: common (mask 0) or per_oc (mask 24 / 8)

    @property
    def reduced(self) -> str:
        """The reduced format the fpmath mode lets the cell GEMMs compute in (``"tf32"``,
        ``"bf16"``, ``"f16"``), or ``""`` (strict)."""
        from ..runtime.fpmath import gemm_math, parse

        mode = self.fpmath.partition(":")[0].strip()
        kind = gemm_math(parse(mode, "--attr-fpmath")) if mode else "strict"
        return "" if kind == "strict" else kind

    @property
    def tf32(self) -> bool:
        """Whether the fpmath mode lets the cell GEMMs run on tensor cores (TF32 for the
        CUDA peer, which has no bf16/f16 mode for f32 RNNs)."""
        return bool(self.reduced)


def lengths_for(p: RnnProblem, o: RnnOptions) -> tuple[int, ...] | None:
    """The per-sequence lengths of ``--seq-lengths``: ``spread`` puts them evenly over
    [1, T]; ``a:b:...`` gives them (repeated over the minibatch)."""
    if not o.seq_lengths:
        return None
    if o.seq_lengths == "spread":
        return tuple(int(v) for v in np.round(np.linspace(1, p.t, p.mb)))
    vals = [int(v) for v in o.seq_lengths.split(":")]
    return tuple(vals[i % len(vals)] for i in range(p.mb))


def _descs(p: RnnProblem, o: RnnOptions):
    dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
    cell = get_cell(ALGS[o.alg][0])
    D = 2 if o.direction in ("concat", "sum") else 1
    G = cell.n_gates
    dic = p.dic if o.with_projection else p.dhc
    dlc = dic * (2 if o.direction == "concat" else 1)
    md = dnnl.memory.desc
    c = {k: getattr(dt, v) for k, v in CFGS[o.cfg].items()}
    d = {"src_layer_desc": md([p.t, p.mb, p.slc], c["src_layer"], tag.tnc),
         "src_iter_desc": md([p.l, D, p.mb, p.sic], c["src_iter"], tag.ldnc),
         "weights_layer_desc": md([p.l, D, p.slc, G, p.dhc], c["weights"], tag.any),
         "weights_iter_desc": md([p.l, D, p.sic, G, p.dhc], c["weights"], tag.any),
         "bias_desc": md([p.l, D, cell.n_bias_gates, p.dhc], c["bias"], tag.ldgo),
         "dst_layer_desc": md([p.t, p.mb, dlc], c["dst_layer"], tag.tnc),
         "dst_iter_desc": md([p.l, D, p.mb, dic], c["dst_iter"], tag.ldnc)}
    if cell.has_cell_state:
        d["src_iter_c_desc"] = md([p.l, D, p.mb, p.dhc], c["src_iter_c"], tag.ldnc)
        d["dst_iter_c_desc"] = md([p.l, D, p.mb, p.dhc], c["dst_iter_c"], tag.ldnc)
    if o.with_peephole:
        d["weights_peephole_desc"] = md([p.l, D, 3, p.dhc], c["peephole"], tag.ldgo)
    if o.with_projection:
        d["weights_projection_desc"] = md([p.l, D, p.dhc, dic], c["projection"], tag.any)
    if cell.has_attention:  # benchdnn's AUGRU_ATTENTION entry: the data type
        d["attention_desc"] = md([p.t, p.mb, 1], c["src_layer"], tag.tnc)
    return cell, d


def int8_scales(p: RnnProblem, o: RnnOptions, cell) -> tuple[np.ndarray, np.ndarray]:
    """benchdnn's weights (G * DHC) and projection (DIC) scales for --scaling."""
    def sc(n):
        n = n if o.scaling == "per_oc" else 1
        return 64.0 * (1.0 + np.arange(n) / n)

    return sc(cell.n_gates * p.dhc), sc(p.dic if o.with_projection else 1)


def int8_attr(attr, p: RnnProblem, o: RnnOptions, cell) -> None:
    """The quantization attributes of an int8 configuration."""
    q = int8_cfg(o.cfg)
    if q is None:
        return
    attr.set_rnn_data_qparams(*INT8_QPARAMS[q])
    w, pr = int8_scales(p, o, cell)
    per_oc = o.scaling == "per_oc"
    attr.set_rnn_weights_qparams(24 if per_oc else 0, w.tolist())
    if o.with_projection:
        attr.set_rnn_weights_projection_qparams(8 if per_oc else 0, pr.tolist())


def create(eng, p: RnnProblem, o: RnnOptions):
    """The primitive descriptors and primitives of one problem: ``(cell, pd, prim, bpd,
    bwd)``, the backward pair None unless ``--prop=BWD_DW``."""
    cell, descs = _descs(p, o)
    cls = getattr(dnnl, ALGS[o.alg][1])
    backward = o.prop == "BWD_DW"
    prop = (dnnl.prop_kind.forward_training if backward
            else getattr(dnnl.prop_kind, PROPS[o.prop]))
    direction = getattr(dnnl.rnn_direction, DIRECTIONS[o.direction])
    act = ((getattr(dnnl.algorithm, ACTIVATIONS[o.activation]),)
           if cell.name == "vanilla_rnn" else ())
    lens = lengths_for(p, o)
    ext = dnnl.rnn_extensions(seq_lengths=lens) if lens else None
    attr = dnnl.primitive_attr()
    fpmath_attr({"attr-fpmath": o.fpmath}, attr)
    int8_attr(attr, p, o, cell)
    pd = cls.primitive_desc(eng, prop, *act, direction, **descs, attr=attr, extensions=ext)
    prim = cls(pd)
    bpd = bwd = None
    if backward:
        bcls = getattr(dnnl, ALGS[o.alg][1].replace("_forward", "_backward"))
        bdescs = dict(descs)
        for k, md in descs.items():
            bdescs["diff_" + k] = dnnl.memory.desc(md.get_dims(), dnnl.memory.data_type.f32,
                                                   dnnl.memory.format_tag.any)
        bpd = bcls.primitive_desc(eng, dnnl.prop_kind.backward, *act, direction, **bdescs,
                                  hint_fwd_pd=pd, attr=attr,
                                  flags=dnnl.rnn_flags.diff_weights_overwrite)
        bwd = bcls(bpd)
    return cell, pd, prim, bpd, bwd


# run in a fresh interpreter by --mode=CREATE: the costs a new process pays, in ms
_CREATE_SNIPPET = """
import json, sys, time
t0 = time.perf_counter()
import pydnnl as dnnl
from pydnnl.benchdnn import rnn as R
t1 = time.perf_counter()
a = json.loads(sys.argv[1])
eng = dnnl.engine(getattr(dnnl.engine.kind, a["engine"]), 0)
t2 = time.perf_counter()
R.create(eng, R.parse_problem(a["problem"]), R.RnnOptions(**a["options"]))
t3 = time.perf_counter()
from pydnnl.runtime.kernel_cache import creation_costs
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "engine_ms": (t2 - t1) * 1e3,
                  "create_ms": (t3 - t2) * 1e3, **creation_costs()}))
"""


def create_in_fresh_process(eng, p: RnnProblem, o: RnnOptions) -> dict:
    """Import, engine and creation times (ms) of the problem in a new Python process that
    shares this one's kernel cache (``PYDNNL_CACHE_DIR``): what a new server process pays."""
    import dataclasses
    import json
    import subprocess
    import sys

    kind = "gpu" if eng.info.is_gpu else "cpu"
    arg = json.dumps({"engine": kind, "problem": p.to_str(),
                      "options": dataclasses.asdict(o)})
    out = subprocess.run([sys.executable, "-c", _CREATE_SNIPPET, arg], capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"--mode=CREATE: the creating process failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def sparse_weights(dims) -> np.ndarray:
    """oneDNN benchdnn's f32 RNN weights (its ``fill_weights``): one non-zero per output
    column, 1 / G (1 for the projection), in row ``(19 o + 7 g + 11 d + 13 l) % I`` of
    ``[L, D, I, G, O]`` (``[L, D, I, O]`` for the projection). A gate's sum then has one
    weight term per GEMM whatever the channel count, which is what the tolerance
    (:func:`tolerance`: it grows with the gates, not with k) is made for; dense weights
    over 1760 channels round past it in any f32 summation order. Every row position is
    still reached by some column, so a misplaced or skipped part of k is still found."""
    proj = len(dims) == 4
    L, D, I = dims[:3]
    G, O = (1, dims[3]) if proj else (dims[3], dims[4])
    w = np.zeros((L, D, I, G, O), np.float32)
    l, d, g, o = np.meshgrid(np.arange(L), np.arange(D), np.arange(G), np.arange(O),
                             indexing="ij")
    w[l, d, (19 * o + 7 * g + 11 * d + 13 * l) % I, g, o] = 1.0 if proj else 1.0 / G
    return w.reshape(dims)


class RnnBench:
    """Creates the primitive and its memories for one problem; times or checks it."""

    def __init__(self, eng, p: RnnProblem, o: RnnOptions, seed: int = 0):
        self.eng, self.p, self.o = eng, p, o
        t0 = time.perf_counter()
        self.cell, self.pd, self.prim, self.bpd, self.bwd = create(eng, p, o)
        self.create_ms = (time.perf_counter() - t0) * 1e3
        rng = np.random.default_rng(seed)
        self.values = {}
        self.args = {}
        self.q = int8_cfg(o.cfg)
        for arg, spec in self.pd.arg_specs().items():
            if arg == dnnl.ARG_WORKSPACE or spec.output:
                self.args[arg] = dnnl.memory(spec.md, eng)
                continue
            if self.q is not None:
                v = self._int8_values(rng, arg, spec.md)
            elif arg in (dnnl.ARG_WEIGHTS_LAYER, dnnl.ARG_WEIGHTS_ITER,
                         dnnl.ARG_WEIGHTS_PROJECTION):
                v = sparse_weights(spec.md.dims)
            else:
                v = rng.standard_normal(spec.md.dims).astype(np.float32)
                if arg == dnnl.ARG_AUGRU_ATTENTION:
                    v = rng.random(spec.md.dims).astype(np.float32)
            self.args[arg] = dnnl.memory(spec.md, eng, v)
            # bf16/f16 inputs: the reference gets the values the memory holds
            self.values[arg] = (v if spec.md.data_type == dnnl.memory.data_type.f32
                                or self.q is not None
                                else self.args[arg].to_numpy().astype(np.float32))
        self.bargs = {}
        if self.bwd is not None:
            for arg, spec in self.bpd.arg_specs().items():
                if arg in self.args:
                    self.bargs[arg] = self.args[arg]
                elif spec.output:
                    self.bargs[arg] = dnnl.memory(spec.md, eng)
                else:
                    v = rng.standard_normal(spec.md.dims).astype(np.float32)
                    self.bargs[arg] = dnnl.memory(spec.md, eng, v)
        self.stream = dnnl.stream(eng)

    def _int8_values(self, rng, arg, md) -> np.ndarray:
        """benchdnn's int8 data: quantized values of the cfg's distribution, s8 weights in
        [-64, 64], f32 states in [0, 1), small f32 bias and cell states."""
        t = md.data_type
        if t == dnnl.memory.data_type.f32:
            if arg == dnnl.ARG_SRC_ITER:
                return rng.random(md.dims).astype(np.float32)
            return (rng.standard_normal(md.dims) * 0.5).astype(np.float32)
        if t == dnnl.memory.data_type.s8 and arg in (
                dnnl.ARG_WEIGHTS_LAYER, dnnl.ARG_WEIGHTS_ITER, dnnl.ARG_WEIGHTS_PROJECTION):
            return np.clip(np.rint(rng.normal(0.0, 32.0, md.dims)), -64, 64).astype(np.int8)
        lo, hi, mean, std = INT8_DATA[self.q]
        v = np.clip(np.rint(rng.normal(mean, std, md.dims)), lo, hi)
        return v.astype(np.uint8 if self.q == "u8" else np.int8)

    def flops(self) -> int:
        """Forward GEMM flops; backward adds twice as many (data and weight gradients)."""
        f = self.pd.shape.flops_forward()
        return f * 3 if self.bwd is not None else f

    def run(self) -> None:
        self.prim.execute(self.stream, self.args)
        if self.bwd is not None:
            self.bwd.execute(self.stream, self.bargs)

    def kernel_profile(self, reps: int = 3) -> list[tuple[str, tuple, int, float]]:
        """See :func:`pydnnl.benchdnn.common.kernel_profile`."""
        from .common import kernel_profile

        return kernel_profile(self, reps)

    def time(self, warmup: int = 2, min_reps: int = 5, min_seconds: float = 1.0) -> list[float]:
        for _ in range(warmup):
            self.run()
        self.stream.wait()
        times = []
        t_end = time.perf_counter() + min_seconds
        while len(times) < min_reps or time.perf_counter() < t_end:
            t0 = time.perf_counter()
            self.run()
            self.stream.wait()
            times.append((time.perf_counter() - t0) * 1e3)
            if len(times) >= 1000:
                break
        return times

    def _int8_reference(self) -> dict:
        from ..reference.rnn_int8 import rnn_int8_forward

        v, o, c = self.values, self.o, CFGS[self.o.cfg]
        w, pr = int8_scales(self.p, o, self.cell)
        scale, shift = INT8_QPARAMS[self.q]
        return rnn_int8_forward(
            self.cell.name, v[dnnl.ARG_SRC_LAYER], v.get(dnnl.ARG_SRC_ITER),
            v.get(dnnl.ARG_SRC_ITER_C), v[dnnl.ARG_WEIGHTS_LAYER], v[dnnl.ARG_WEIGHTS_ITER],
            v[dnnl.ARG_BIAS], direction=DIRECTIONS[o.direction], data_scale=scale,
            data_shift=shift, weights_scales=w, data_type=self.q, src_iter_dt=c["src_iter"],
            weights_projection=v.get(dnnl.ARG_WEIGHTS_PROJECTION), projection_scales=pr,
            dst_layer_dt=c["dst_layer"], dst_iter_dt=c["dst_iter"])

    def check_int8(self) -> float:
        """The int8 check, in quantization steps (pass: <= 1). Quantized outputs (and f32
        ones in units of 1 / scale; 2 / scale for a bidirectional sum) may differ from the
        float64 reference by one step where f32 rounding put a value on the other side of a
        rounding boundary: at most one step everywhere, and in at most 3% of the elements.
        The f32 cell state is checked with benchdnn's approach for int8 dst_iter_c (norms):
        its relative L2 error must stay under 1e-3 (a rounded-over state moves the next
        pre-activations by at most 64 / (64 * scale))."""
        self.run()
        self.stream.wait()
        ref, c = self._int8_reference(), CFGS[self.o.cfg]
        scale = INT8_QPARAMS[self.q][0]
        worst = 0.0
        for arg, key, t in ((dnnl.ARG_DST_LAYER, "dst_layer", c["dst_layer"]),
                            (dnnl.ARG_DST_ITER, "dst_iter", c["dst_iter"])):
            if arg not in self.args:
                continue
            r = ref[key]
            got = self.args[arg].to_numpy().astype(np.float64).reshape(r.shape)
            unit = 1.0 if t != "f32" else 1.0 / scale
            if t == "f32" and key == "dst_layer" and self.o.direction == "sum":
                unit *= 2
            steps = np.abs(got - r) / unit
            worst = max(worst, float(steps.max()))
            if np.mean(steps > 1e-3) > 0.03:
                worst = max(worst, 2.0)
        if dnnl.ARG_DST_ITER_C in self.args and ref["dst_iter_c"] is not None:
            r = ref["dst_iter_c"]
            got = self.args[dnnl.ARG_DST_ITER_C].to_numpy().reshape(r.shape)
            rel = float(np.linalg.norm(got - r) / max(np.linalg.norm(r), 1e-30))
            worst = max(worst, rel / 1e-3)
        return worst

    def _reference(self):
        from ..reference.rnn import rnn_forward

        v = self.values
        att = v.get(dnnl.ARG_AUGRU_ATTENTION)
        return rnn_forward(self.cell.name, v[dnnl.ARG_SRC_LAYER], v.get(dnnl.ARG_SRC_ITER),
                           v.get(dnnl.ARG_SRC_ITER_C), v[dnnl.ARG_WEIGHTS_LAYER],
                           v[dnnl.ARG_WEIGHTS_ITER], v[dnnl.ARG_BIAS],
                           direction=DIRECTIONS[self.o.direction],
                           activation=ACTIVATIONS[self.o.activation][8:].lower(),
                           weights_peephole=v.get(dnnl.ARG_WEIGHTS_PEEPHOLE),
                           weights_projection=v.get(dnnl.ARG_WEIGHTS_PROJECTION),
                           attention=None if att is None else att[..., 0], dtype=np.float64,
                           **({"seq_lengths": np.array(lengths_for(self.p, self.o))}
                              if self.o.seq_lengths else {}))

    def check_backward(self) -> float:
        """Max relative difference of every forward output and every diff output of the
        backward pass to the float64 reference (``rnn_backward``)."""
        from ..reference.rnn import rnn_backward

        err = self.check()
        ref = self._reference()
        g = {a: m.to_numpy() for a, m in self.bargs.items()}
        rb = rnn_backward(self.cell.name, ref[3], g[dnnl.ARG_DIFF_DST_LAYER],
                          g.get(dnnl.ARG_DIFF_DST_ITER), g.get(dnnl.ARG_DIFF_DST_ITER_C))
        names = {"diff_src_layer": dnnl.ARG_DIFF_SRC_LAYER, "diff_src_iter": dnnl.ARG_DIFF_SRC_ITER,
                 "diff_src_iter_c": dnnl.ARG_DIFF_SRC_ITER_C,
                 "diff_weights_layer": dnnl.ARG_DIFF_WEIGHTS_LAYER,
                 "diff_weights_iter": dnnl.ARG_DIFF_WEIGHTS_ITER, "diff_bias": dnnl.ARG_DIFF_BIAS,
                 "diff_weights_peephole": dnnl.ARG_DIFF_WEIGHTS_PEEPHOLE,
                 "diff_weights_projection": dnnl.ARG_DIFF_WEIGHTS_PROJECTION,
                 "diff_attention": dnnl.ARG_DIFF_AUGRU_ATTENTION}
        for key, arg in names.items():
            r = rb.get(key)
            if r is None or arg not in g:
                continue
            got = g[arg].reshape(r.shape) if key != "diff_attention" else g[arg][..., 0]
            diff = float(np.max(np.abs(got - r)))
            # benchdnn's backward rule (its rnn_add_check): an absolute difference under the
            # threshold passes too, so a gradient that cancels to near zero is not judged
            # relative to its own tiny magnitude
            err = max(err, min(diff, diff / max(float(np.max(np.abs(r))), 1e-30)))
        return err

    def check(self) -> float:
        """Max relative difference of dst_layer (and dst_iter) to the numpy reference."""
        self.run()
        self.stream.wait()
        ref = self._reference()
        err = 0.0
        for arg, r in ((dnnl.ARG_DST_LAYER, ref[0]), (dnnl.ARG_DST_ITER, ref[1]),
                       (dnnl.ARG_DST_ITER_C, ref[2])):
            if arg in self.args and r is not None:
                got = self.args[arg].to_numpy()
                err = max(err, float(np.max(np.abs(got - r)) / max(np.max(np.abs(r)), 1e-30)))
        return err


def torch_peer(o: RnnOptions, device: str = "cpu") -> str | None:
    """How PyTorch runs the configuration ``o.cfg`` (issue: the same data types side by side):
    ``"f32"``; ``"autocast_bf16"`` / ``"autocast_f16"`` (``torch.autocast``) for the bf16 and
    f16 configurations; ``"dynamic_qint8"`` (``torch.ao.quantization.quantize_dynamic``:
    s8 weights, activations quantized per call, CPU only) for LSTM inference in an int8
    configuration. None where PyTorch has no counterpart (int8 training, int8 GRU/RNN, int8
    on a GPU)."""
    half = CFGS[o.cfg]["src_layer"]
    if half == "f32":
        return "f32"
    if half in ("bf16", "f16"):
        return f"autocast_{half}"
    if o.prop == "FWD_I" and o.alg == "VANILLA_LSTM" and device == "cpu":
        return "dynamic_qint8"
    return None


def torch_time(p: RnnProblem, o: RnnOptions, device: str = "cpu", min_seconds: float = 1.0):
    """Median ms of the same problem with torch.nn.{RNN,LSTM,GRU} run as :func:`torch_peer`
    says, or None if not comparable."""
    try:
        import torch
    except ImportError:
        return None
    peer = torch_peer(o, device)
    if peer is None:
        return None
    if o.alg not in ("VANILLA_LSTM", "LBR_GRU", "VANILLA_RNN") or o.with_peephole:
        return None  # torch.nn.GRU is linear-before-reset; no peephole in torch
    if o.direction in ("right2left", "sum"):
        return None
    if o.with_projection:
        return None
    bidir = o.direction == "concat"
    kw = dict(input_size=p.slc, hidden_size=p.dhc, num_layers=p.l, bidirectional=bidir)
    if o.alg == "VANILLA_LSTM":
        m = torch.nn.LSTM(**kw)
    elif o.alg == "LBR_GRU":
        m = torch.nn.GRU(**kw)
    else:
        m = torch.nn.RNN(nonlinearity=ACTIVATIONS[o.activation][8:].lower(), **kw) \
            if o.activation in ("TANH", "RELU") else None
        if m is None:
            return None
    if p.l > 1 and bidir:
        return None  # torch stacks bidirectional layers differently from oneDNN
    m = m.to(device)
    if peer == "dynamic_qint8":
        from torch.ao.quantization import quantize_dynamic

        m = quantize_dynamic(m, {torch.nn.LSTM}, dtype=torch.qint8)
    amp = (torch.autocast(device_type=device, dtype=getattr(torch, {"autocast_bf16": "bfloat16",
           "autocast_f16": "float16"}[peer])) if peer.startswith("autocast")
           else contextlib.nullcontext())
    # cuDNN's RNNs use TF32 by default (allow_tf32): only where --attr-fpmath lets pydnnl too
    torch_tf32("cuda" if device.startswith("cuda") else device, o.tf32)
    x = torch.randn(p.t, p.mb, p.slc, device=device)
    lens = lengths_for(p, o)
    training = o.prop != "FWD_I"
    backward = o.prop == "BWD_DW"
    ctx = torch.enable_grad() if training else torch.no_grad()
    sync = (torch.cuda.synchronize if device.startswith("cuda") else (lambda: None))
    if backward:
        x.requires_grad_(True)

    def step():
        if lens:  # padded input with lengths: the PyTorch way is a PackedSequence
            xp = torch.nn.utils.rnn.pack_padded_sequence(x, list(lens), enforce_sorted=False)
            y = m(xp)[0].data
        else:
            y = m(x)[0]
        if backward:
            y.backward(torch.ones_like(y))

    with ctx, amp:
        for _ in range(2):
            step()
        sync()
        times = []
        t_end = time.perf_counter() + min_seconds
        while len(times) < 5 or time.perf_counter() < t_end:
            t0 = time.perf_counter()
            step()
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
            if len(times) >= 1000:
                break
    return float(np.median(times))
