"""benchdnn's RNN driver: problem syntax, creation, timing, correctness, peer comparison."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace

import numpy as np

import pydnnl as dnnl

from ..cells import get_cell
from .common import fpmath_attr, torch_tf32

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
TF32_EPS = 2.0 ** -10  # the spacing of TF32 (10 mantissa bits) at 1, as F32_EPS is of f32


def tolerance(p: RnnProblem, o: RnnOptions) -> float:
    """oneDNN benchdnn's f32 RNN threshold (its ``setup_cmp``): 4 * ceil(log2(accumulated
    terms * T)) * eps, doubled for backward and for bidirectional sum. ``--mode=C`` applies it
    to max |pydnnl - float64 reference| / max |reference| of each output, benchdnn's L-inf
    norm check. With ``--attr-fpmath=tf32`` (or any) the same formula with TF32's epsilon.
    """
    g = get_cell(ALGS[o.alg][0]).n_gates
    acc = 2 * g + 1  # two GEMMs and the bias per gate
    if o.alg in ("VANILLA_GRU", "VANILLA_AUGRU"):
        acc *= p.sic
    if o.prop == "BWD_DW":
        acc *= max(g * p.dhc, p.mb)
    return (4 * (2 if o.prop == "BWD_DW" else 1) * (2 if o.direction == "sum" else 1)
            * float(np.ceil(np.log2(acc * p.t))) * (TF32_EPS if o.tf32 else F32_EPS))


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

    @property
    def tf32(self) -> bool:
        """Whether the fpmath mode lets the cell GEMMs run on TF32."""
        return self.fpmath.partition(":")[0].strip().lower() in ("tf32", "any")


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
    d = {"src_layer_desc": md([p.t, p.mb, p.slc], dt.f32, tag.tnc),
         "src_iter_desc": md([p.l, D, p.mb, p.sic], dt.f32, tag.ldnc),
         "weights_layer_desc": md([p.l, D, p.slc, G, p.dhc], dt.f32, tag.any),
         "weights_iter_desc": md([p.l, D, p.sic, G, p.dhc], dt.f32, tag.any),
         "bias_desc": md([p.l, D, cell.n_bias_gates, p.dhc], dt.f32, tag.ldgo),
         "dst_layer_desc": md([p.t, p.mb, dlc], dt.f32, tag.tnc),
         "dst_iter_desc": md([p.l, D, p.mb, dic], dt.f32, tag.ldnc)}
    if cell.has_cell_state:
        d["src_iter_c_desc"] = md([p.l, D, p.mb, p.dhc], dt.f32, tag.ldnc)
        d["dst_iter_c_desc"] = md([p.l, D, p.mb, p.dhc], dt.f32, tag.ldnc)
    if o.with_peephole:
        d["weights_peephole_desc"] = md([p.l, D, 3, p.dhc], dt.f32, tag.ldgo)
    if o.with_projection:
        d["weights_projection_desc"] = md([p.l, D, p.dhc, dic], dt.f32, tag.any)
    if cell.has_attention:
        d["attention_desc"] = md([p.t, p.mb, 1], dt.f32, tag.tnc)
    return cell, d


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
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "engine_ms": (t2 - t1) * 1e3,
                  "create_ms": (t3 - t2) * 1e3}))
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
        for arg, spec in self.pd.arg_specs().items():
            if arg == dnnl.ARG_WORKSPACE or spec.output:
                self.args[arg] = dnnl.memory(spec.md, eng)
                continue
            scale = 1.0 / np.sqrt(max(spec.md.dims[-1], 1)) if len(spec.md.dims) == 5 else 1.0
            if arg == dnnl.ARG_WEIGHTS_PROJECTION:  # sums dhc terms: keep outputs O(1)
                scale = 1.0 / np.sqrt(max(spec.md.dims[2], 1))
            v = (rng.standard_normal(spec.md.dims) * scale).astype(np.float32)
            if arg == dnnl.ARG_AUGRU_ATTENTION:
                v = rng.random(spec.md.dims).astype(np.float32)
            self.values[arg] = v
            self.args[arg] = dnnl.memory(spec.md, eng, v)
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

    def flops(self) -> int:
        """Forward GEMM flops; backward adds twice as many (data and weight gradients)."""
        f = self.pd.shape.flops_forward()
        return f * 3 if self.bwd is not None else f

    def run(self) -> None:
        self.prim.execute(self.stream, self.args)
        if self.bwd is not None:
            self.bwd.execute(self.stream, self.bargs)

    def kernel_profile(self, reps: int = 3) -> list[tuple[str, tuple, int, float]]:
        """``(kernel, global size, launches, device ms)`` per execution, slowest first, from
        a profiling stream (the minimum over ``reps`` executions of each group's total)."""
        import collections

        self.run()
        prof = dnnl.stream(self.eng, dnnl.stream.flags.profiling)
        best: dict = {}
        saved, self.stream = self.stream, prof
        try:
            for _ in range(reps):
                self.run()
                groups = collections.defaultdict(lambda: [0, 0.0])
                for name, size, ms in prof.get_kernel_profile():
                    g = groups[(name, tuple(size) if size else ())]
                    g[0] += 1
                    g[1] += ms
                for key, (n, ms) in groups.items():
                    if key not in best or ms < best[key][1]:
                        best[key] = (n, ms)
        finally:
            self.stream = saved
        rows = [(k[0], k[1], n, ms) for k, (n, ms) in best.items()]
        return sorted(rows, key=lambda r: -r[3])

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


def torch_time(p: RnnProblem, o: RnnOptions, device: str = "cpu", min_seconds: float = 1.0):
    """Median ms of the same problem with torch.nn.{RNN,LSTM,GRU}, or None if not comparable."""
    try:
        import torch
    except ImportError:
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

    with ctx:
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
