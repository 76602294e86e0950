"""benchdnn's convolution driver: options, creation, timing, correctness, PyTorch comparison.

Problems use benchdnn's descriptor syntax (:mod:`.conv_problem`, e.g.
``mb1ic64ih56oc64oh56kh3ph1``); every tensor is created with ``format_tag.any``, as benchdnn
does by default, so the timed primitive runs in the layouts its solver chose (reorders from
user layouts are not timed). The backward directions build the forward descriptor first and
pass it as the hint, as a training framework would. A deconvolution problem (``--deconv``)
runs the deconvolution primitives and is checked against the deconvolution reference.

Data types (``--dt``): one type for every tensor (``f32``, ``bf16``, ``f16``) or benchdnn's
``SRC:WEI:DST`` (``bf16:bf16:f32``); for the backward directions these name diff_src,
weights or diff_weights, and diff_dst, as in benchdnn. The deprecated ``--cfg`` names
(``bf16bf16bf16``, ``f16``, ``bf16bf16f32``, ``f32bf16bf16``...) mean what benchdnn read them
as. The bias (or diff_bias) takes the output's type (dst in forward, diff_weights in backward
weights). Combinations outside oneDNN's table are the primitive's ``unimplemented``.

int8 forward (``--dt=u8:s8:s8`` and the like): ``--attr-scales`` and ``--attr-zero-points`` take
benchdnn's ``ARG:POLICY[:VALUE]`` entries (the matmul driver's parsing; ``wei:per_oc`` covers
both dims of grouped weights), the tensors hold small integers, and mode C checks oneDNN's
quantized formula (:func:`pydnnl.reference.conv_int8.conv_int8`; ``deconv_int8`` for
``--deconv``): an integer dst within one unit (a .5 tie's other side), a float dst within its
half ulp and f32's arithmetic.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

import pydnnl as dnnl

from ..constants import arg_name
from ..error import invalid_arguments, runtime_error, unimplemented
from ..primitives.conv.solvers import solvers
from .common import (
    TF32_RTOL,
    fpmath_attr,
    parse_post_ops,
    torch_tf32,
    typed_values,
)
from .conv_problem import ConvProblem

# benchdnn's --dir values: (direction, forward prop_kind, with bias)
DIRS = {"FWD_B": ("fwd", "forward_training", True),
        "FWD_D": ("fwd", "forward_training", False),
        "FWD_I": ("fwd", "forward_inference", False),
        "BWD_D": ("bwd_d", "forward_training", False),
        "BWD_W": ("bwd_w", "forward_training", False),
        "BWD_WB": ("bwd_w", "forward_training", True)}
# benchdnn's deprecated --cfg names (its handle_legacy_cfg): src, weights, dst data types
_LEGACY_CFGS = {
    "f32": "f32", "f32_wino": "f32", "f64": "f64", "f16": "f16", "bf16bf16bf16": "bf16",
    "bf16bf16f32": "bf16:bf16:f32", "bf16bf16f16": "bf16:bf16:f16",
    "bf16bf16s8": "bf16:bf16:s8", "bf16bf16u8": "bf16:bf16:u8",
    "f32bf16bf16": "f32:bf16:bf16", "bf16f32bf16": "bf16:f32:bf16",
    "f16f16f32": "f16:f16:f32", "f16f16s8": "f16:f16:s8", "f16f16u8": "f16:f16:u8",
    "f32f16f16": "f32:f16:f16", "f16f32f16": "f16:f32:f16",
    "f32f32s8": "f32:f32:s8", "f32f32u8": "f32:f32:u8",
    **{f"{a}s8{d}": f"{a}:s8:{d}" for a in ("u8", "s8")
       for d in ("f32", "f16", "bf16", "s32", "s8", "u8")},
}
# unit roundoff of an output type: its rounding is within 2^-p of the value for p
# significant bits (bf16 8, f16 11); f32 outputs are the computation's own
OUTPUT_ROUNDOFF = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11, "f32": 0.0}


def parse_dt(text: str) -> tuple[str, str, str]:
    """``(src, weights, dst)`` data type names of a benchdnn ``--dt`` (one type or
    ``SRC:WEI:DST``) or deprecated ``--cfg`` value; raises invalid_arguments naming it."""
    t = text.strip().lower() or "f32"
    t = _LEGACY_CFGS.get(t, t)
    parts = t.split(":")
    if len(parts) == 1:
        parts *= 3
    known = dnnl.memory.data_type.__members__
    if len(parts) != 3 or any(p not in known or p == "undef" for p in parts):
        raise invalid_arguments(f"--dt: expected a data type or SRC:WEI:DST (f32, bf16, f16, "
                                f"...) or a --cfg name such as bf16bf16bf16, got {text!r}")
    return parts[0], parts[1], parts[2]


def dt_option(opts: dict) -> str:
    """The data type text of a problem's options: ``--dt`` or the deprecated ``--cfg`` (both
    set one setting in benchdnn, the later winning; the options in effect here no longer
    say which came later, so two that disagree raise invalid_arguments)."""
    dt, cfg = opts.get("dt", "") or "", opts.get("cfg", "") or ""
    if dt and cfg and parse_dt(dt) != parse_dt(cfg):
        raise invalid_arguments(f"--dt={dt} and --cfg={cfg} are both in effect and disagree; "
                                f"give one of them (--reset clears both)")
    return dt or cfg


# benchdnn's --alg spellings (any case); a solver name pins that solver
_ALG_NAMES = {"direct": "direct", "winograd": "winograd", "wino": "winograd", "auto": "auto"}


def parse_dir(text: str) -> str:
    """A benchdnn ``--dir`` value, upper-cased; raises invalid_arguments naming the choices."""
    d = text.strip().upper()
    if d not in DIRS:
        raise invalid_arguments(f"--dir: expected one of {', '.join(DIRS)}, got {text!r}")
    return d


def parse_alg(text: str) -> str:
    """``direct``, ``winograd``, ``auto`` or a solver name; raises invalid_arguments."""
    a = text.strip().lower()
    if a in _ALG_NAMES:
        return _ALG_NAMES[a]
    if a in solvers():
        return a
    raise invalid_arguments(f"--alg: expected one of direct, winograd, auto or a solver name "
                            f"({', '.join(solvers())}), got {text!r}")


@dataclass(frozen=True)
class ConvOptions:
    """The options in effect for a problem."""

    dir: str = "FWD_B"
    alg: str = "auto"
    post_ops: str = ""  # benchdnn's --attr-post-ops (forward only)
    stag: str = "any"  # benchdnn's --stag/--wtag/--dtag: any, abx (plain), axb (channels last)
    wtag: str = "any"
    dtag: str = "any"
    fpmath: str = ""  # benchdnn's --attr-fpmath (strict, tf32, bf16, f16, any)
    dt: tuple = ("f32", "f32", "f32")  # src (diff_src), weights (diff_weights), dst (diff_dst)
    scales: str = ""  # benchdnn's --attr-scales (int8 forward)
    zero_points: str = ""  # benchdnn's --attr-zero-points (int8 forward)

    @property
    def tf32(self) -> bool:
        """Whether the fpmath mode lets the convolution's products run on TF32."""
        return self.fpmath.partition(":")[0].strip().lower() in ("tf32", "any")

    @property
    def output_dt(self) -> str:
        """The data type of the direction's output (and of its bias)."""
        return self.dt[{"fwd": 2, "bwd_d": 0, "bwd_w": 1}[DIRS[self.dir][0]]]

    def to_str(self) -> str:
        dts = "" if self.dt == ("f32",) * 3 else (
            self.dt[0] if len(set(self.dt)) == 1 else ":".join(self.dt))
        tags = "".join(f" --{k}={v}" for k, v in (("stag", self.stag), ("wtag", self.wtag),
                                                   ("dtag", self.dtag)) if v != "any")
        return (f"--dt={dts} " if dts else "") + f"--dir={self.dir} --alg={self.alg}" + (
            f" --attr-post-ops={self.post_ops}" if self.post_ops else "") + tags + (
            f" --attr-fpmath={self.fpmath}" if self.fpmath else "") + (
            f" --attr-scales={self.scales}" if self.scales else "") + (
            f" --attr-zero-points={self.zero_points}" if self.zero_points else "")

    @property
    def int8(self) -> bool:
        """u8/s8 src in forward propagation: oneDNN's int8 convolution."""
        return self.dt[0] in ("u8", "s8") and DIRS[self.dir][0] == "fwd"


_PLAIN = {3: "ncw", 4: "nchw", 5: "ncdhw"}
_LAST = {3: "nwc", 4: "nhwc", 5: "ndhwc"}


def _tag(text: str, ndims: int, what: str):
    """The format tag of benchdnn's ``any``/``abx``/``axb`` (or a oneDNN tag name)."""
    tag = dnnl.memory.format_tag
    name = {"any": "any", "abx": _PLAIN.get(ndims, ""), "axb": _LAST.get(ndims, "")}.get(
        text, text)
    if not name or not hasattr(tag, name):
        raise invalid_arguments(f"--{what}: expected any, abx, axb or a format tag for "
                                f"{ndims} dimensions, got {text!r}")
    return getattr(tag, name)


def _algorithm_and_solver(alg: str, deconv: bool = False):
    """(oneDNN algorithm, pinned solver name or None) of a normalized ``--alg`` value."""
    A = dnnl.algorithm
    op = "deconvolution" if deconv else "convolution"
    if alg == "direct":
        return getattr(A, f"{op}_direct"), None
    if alg == "winograd":
        return getattr(A, f"{op}_winograd"), None
    if alg == "auto":
        return A.convolution_auto, None
    fam = solvers()[alg].family
    return (getattr(A, f"{op}_winograd") if fam == "winograd" else A.convolution_auto), alg


def _reduction_length(p: ConvProblem, direction: str) -> int:
    """Terms summed per output element, which float32 rounding grows with."""
    if p.deconvolution:  # the sums of the convolution whose backward data it is
        swap = {"fwd": "bwd_d", "bwd_d": "fwd", "bwd_w": "bwd_w"}
        return _reduction_length(p.as_convolution(), swap[direction])
    k = int(np.prod(p.kernel))
    if direction == "fwd":
        return p.ic // p.g * k
    if direction == "bwd_d":
        return p.oc // p.g * k
    return p.mb * int(np.prod(p.dst_spatial))


class ConvBench:
    """The primitive of one problem and direction with its memories; times or checks it.

    Raises :class:`pydnnl.error.unimplemented` when the chosen algorithm does not apply.
    """

    def __init__(self, eng, p: ConvProblem, o: ConvOptions, seed: int = 0):
        self.eng, self.p, self.o = eng, p, o
        self.direction, prop_name, self.with_bias = DIRS[o.dir]
        dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
        md = dnnl.memory.desc
        nd = len(p.src_dims())
        s_dt, w_dt, d_dt = (getattr(dt, n) for n in o.dt)
        stag = _tag(o.stag, nd, "stag")
        wtag = tag.any if o.wtag == "any" else _tag(o.wtag, len(p.weights_dims()), "wtag")
        dtag = _tag(o.dtag, nd, "dtag")
        src_md = md(p.src_dims(), s_dt, stag)
        wei_md = md(p.weights_dims(), w_dt, wtag)
        dst_md = md(p.dst_dims(), d_dt, dtag)
        bias_md = md(p.bias_dims(), getattr(dt, o.output_dt), tag.any) if self.with_bias \
            else None
        geo = (list(p.strides), list(p.dilates), list(p.padding_l), list(p.padding_r))
        alg, solver = _algorithm_and_solver(o.alg, p.deconvolution)
        op = "deconvolution" if p.deconvolution else "convolution"
        fwd_cls, bwd_d_cls, bwd_w_cls = (getattr(dnnl, f"{op}_{d}") for d in
                                         ("forward", "backward_data", "backward_weights"))
        pin = {} if solver is None else {"solver": solver}
        prop = getattr(dnnl.prop_kind, prop_name)
        self.post_ops = parse_post_ops(o.post_ops, p.dst_dims())
        attr = dnnl.primitive_attr()
        attr.set_post_ops(self.post_ops)
        fpmath_attr({"attr-fpmath": o.fpmath}, attr)
        self.scales, self.zero_points = self._quantization(p, o, attr)
        self.attr = attr
        from ..runtime.kernel_cache import creation_costs

        costs0 = creation_costs()
        t0 = time.perf_counter()
        if self.direction == "fwd":
            self.pd = fwd_cls.primitive_desc(
                eng, prop, alg, src_md, wei_md, bias_md, dst_md, *geo, attr, **pin)
            self.prim = fwd_cls(self.pd)
        else:
            # the hint gives layouts only: a forward of the data's type (weights in backward
            # data, src in backward weights: the types oneDNN's table pairs)
            h_dt = w_dt if self.direction == "bwd_d" else s_dt
            hint = self._hint(fwd_cls, eng, prop, md(p.src_dims(), h_dt, stag),
                              md(p.weights_dims(), h_dt, wtag), md(p.dst_dims(), h_dt, dtag),
                              geo, solver)
            # the attributes too (the fpmath mode; post-ops, which backward passes refuse)
            if self.direction == "bwd_d":
                self.pd = bwd_d_cls.primitive_desc(
                    eng, alg, src_md, wei_md, dst_md, *geo, hint, attr, **pin)
                self.prim = bwd_d_cls(self.pd)
            else:
                self.pd = bwd_w_cls.primitive_desc(
                    eng, alg, src_md, wei_md, bias_md, dst_md, *geo, hint, attr, **pin)
                self.prim = bwd_w_cls(self.pd)
        self.create_ms = (time.perf_counter() - t0) * 1e3
        #: kernel_cache.creation_costs() before and after creating the primitive
        self.costs = (costs0, creation_costs())
        rng = np.random.default_rng(seed)
        self.values: dict[int, np.ndarray] = {}
        self.args: dict[int, dnnl.memory] = {}
        self.stream = dnnl.stream(eng)
        if o.int8:
            self._int8_values(eng, seed)
            return
        for arg, spec in self.pd.arg_specs().items():
            if spec.output and not (arg == dnnl.ARG_DST and len(self.post_ops)):
                self.args[arg] = dnnl.memory(spec.md, eng)
                continue
            v = rng.standard_normal(spec.md.dims).astype(np.float32)
            self.args[arg] = dnnl.memory(spec.md, eng, typed_values(v, spec.md.data_type))
            # the reference reads what the memory holds (rounded to bf16/f16; integers)
            self.values[arg] = self.args[arg].to_numpy().astype(np.float32)

    @staticmethod
    def _quantization(p: ConvProblem, o: ConvOptions, attr) -> tuple[dict, dict]:
        """``--attr-scales`` / ``--attr-zero-points`` (matmul's parsing) set on ``attr``;
        benchdnn's ``per_oc`` weights policy covers both dims of grouped weights."""
        from .matmul import parse_scales, parse_zero_points, set_scales, set_zero_points

        if not (o.scales or o.zero_points):
            return {}, {}
        if not o.int8:
            raise unimplemented("--attr-scales/--attr-zero-points: implemented for int8 "
                                "(u8/s8 src) convolution and deconvolution forward only")
        grouped = len(p.weights_dims()) == len(p.src_dims()) + 1
        dims = {dnnl.ARG_SRC: p.src_dims(), dnnl.ARG_WEIGHTS: p.weights_dims(),
                dnnl.ARG_DST: p.dst_dims()}
        oc_dim = {dnnl.ARG_SRC: 1, dnnl.ARG_WEIGHTS: 0, dnnl.ARG_DST: 1}
        scales = parse_scales(o.scales, dims, oc_dim)
        if grouped and scales.get(dnnl.ARG_WEIGHTS, (0,))[0] == 1:
            scales[dnnl.ARG_WEIGHTS] = (3, scales[dnnl.ARG_WEIGHTS][1])
        zps = parse_zero_points(o.zero_points, dims, oc_dim)
        set_scales(attr, scales)
        set_zero_points(attr, zps)
        return scales, zps

    def _int8_values(self, eng, seed: int) -> None:
        """Small integers in the integer tensors, the scales' and zero points' values
        (matmul's choices); float tensors read back as stored."""
        from .matmul import int8_args, scale_values, zero_point_values

        self.values, self.args = int8_args(self.pd, eng, seed)
        for arg, m in self.args.items():
            if m.get_desc().data_type in (dnnl.memory.data_type.bf16, dnnl.memory.data_type.f16):
                self.values[arg] = m.to_numpy().astype(np.float32)
        self.scale_vals = scale_values(self, self.scales)
        zero_point_values(self, self.zero_points)
        # per-channel zero points (mask 2) vary as benchdnn's fill_zero_points draws them,
        # integers in [max(-2, lowest), 2]; lowest is src's type for src's, whose padded taps
        # hold them (a value outside it cannot cancel there: docs/convolution.md)
        rng = np.random.default_rng(seed + 1)
        for arg, e in self.zero_points.items():
            if e[0]:
                lo = 0 if arg == dnnl.ARG_SRC and self.o.dt[0] == "u8" else -2
                v = rng.integers(lo, 3, self.zp_vals[arg].shape).astype(np.int32)
                key = dnnl.ARG_ATTR_ZERO_POINTS | arg
                self.args[key].write(v)
                self.values[key] = self.zp_vals[arg] = v

    def _check_int8(self) -> float:
        """Max error relative to dst's magnitude against oneDNN's quantized formula
        (:func:`pydnnl.reference.conv_int8.conv_int8`); the tolerance (one unit of an integer
        dst, a float dst's half ulp) is kept for :meth:`tolerance`."""
        from ..reference.conv_int8 import conv_int8
        from ..reference.post_ops import apply_post_ops
        from .common import operand_entries, post_op_arg
        from .matmul import int8_error

        v, p = self.values, self.p
        prior = v[dnnl.ARG_DST].astype(np.float64)
        self.run()
        self.stream.wait()
        ops = {i: v[post_op_arg(self.post_ops, i)] for i in operand_entries(self.post_ops)}
        sc = {a: self.scale_vals[a] for a in self.scale_vals}
        zp = {a: z.reshape(-1).astype(np.int64) for a, z in self.zp_vals.items()}
        groups = p.weights_dims()[0] if len(p.weights_dims()) == len(p.src_dims()) + 1 else 1
        y = conv_int8(v[dnnl.ARG_SRC], v[dnnl.ARG_WEIGHTS], p.strides, p.padding_l,
                      p.dst_dims()[2:], p.dilates, groups, v.get(dnnl.ARG_BIAS),
                      float(sc[dnnl.ARG_SRC][0]) if dnnl.ARG_SRC in sc else 1.0,
                      sc.get(dnnl.ARG_WEIGHTS, 1.0),
                      float(sc[dnnl.ARG_DST][0]) if dnnl.ARG_DST in sc else 1.0,
                      zp.get(dnnl.ARG_SRC, 0), zp.get(dnnl.ARG_DST, 0),
                      post_ops=lambda x: apply_post_ops(x, self.post_ops, prior, ops),
                      deconvolution=p.deconvolution)
        err, self._int8_tol = int8_error(self.args[dnnl.ARG_DST].to_numpy(), y,
                                         getattr(dnnl.memory.data_type, self.o.dt[2]))
        return err

    @staticmethod
    def _hint(fwd_cls, eng, prop, src_md, wei_md, dst_md, geo, solver):
        """The forward descriptor backward passes take as hint (its layouts are reused):
        the same pinned solver where it does forward too, else the automatic choice."""
        A = dnnl.algorithm
        if solver is not None and solvers()[solver].family != "winograd":
            try:
                return fwd_cls.primitive_desc(eng, prop, A.convolution_auto, src_md, wei_md,
                                              None, dst_md, *geo, solver=solver)
            except unimplemented:
                pass
        return fwd_cls.primitive_desc(eng, prop, A.convolution_auto, src_md, wei_md, None,
                                      dst_md, *geo)

    @property
    def solver(self) -> str:
        return self.pd.get_solver()

    def flops(self) -> float:
        """benchdnn's count (the same for every direction)."""
        return self.p.flops()

    def run(self) -> None:
        self.prim.execute(self.stream, self.args)

    def time(self, warmup: int = 2, min_reps: int = 5, min_seconds: float = 1.0) -> list[float]:
        """Milliseconds of each execution (host wall clock around execute + wait)."""
        for _ in range(warmup):
            self.run()
        self.stream.wait()
        times: list[float] = []
        t_end = time.perf_counter() + min_seconds
        while len(times) < min_reps or time.perf_counter() < t_end:
            t0 = time.perf_counter()
            self.run()
            self.stream.wait()
            times.append((time.perf_counter() - t0) * 1e3)
            if len(times) >= 1000:
                break
        return times

    def tolerance(self) -> float:
        """Accepted max error relative to the output's magnitude: 1e-5 (3e-5 for Winograd and
        2e-5 for FFT, whose transforms round more), growing with the square root of the summed
        terms past 1024 (float32 rounding of long sums). bf16/f16 data is computed in f32 on
        the rounded inputs the reference reads too, so only a bf16/f16 output adds its own
        rounding: at most its unit roundoff (2^-8 bf16, 2^-11 f16) of each value, so of the
        magnitude, on top of the f32 figure."""
        if self.o.int8:
            return self._int8_tol
        base = {"winograd_f2x3": 3e-5, "fft": 2e-5}.get(self.pd.get_solver(), 1e-5)
        if self.o.tf32 and self.eng.info.is_gpu and self.eng.info.inline_ptx:
            base = TF32_RTOL  # products on TF32 tensor cores (10-bit mantissa inputs)
        f32 = base * max(1.0, float(np.sqrt(_reduction_length(self.p, self.direction) / 1024)))
        u = OUTPUT_ROUNDOFF.get(self.o.output_dt, 0.0)
        return f32 + u * (1.0 + f32)

    def check(self) -> float:
        """Max error of every output relative to its magnitude, against the float64 numpy
        reference (:mod:`pydnnl.reference.conv`; its deconv_* functions for a deconvolution)."""
        from ..reference import conv as R

        if self.o.int8:
            return self._check_int8()
        self.run()
        self.stream.wait()
        p, v = self.p, self.values
        geo = (p.strides, p.dilates, p.padding_l, p.padding_r)
        op = "deconv" if p.deconvolution else "conv"
        forward, backward_data, backward_weights = (
            getattr(R, f"{op}_{d}") for d in ("forward", "backward_data", "backward_weights"))
        if self.direction == "fwd":
            ref = {dnnl.ARG_DST: forward(v[dnnl.ARG_SRC], v[dnnl.ARG_WEIGHTS],
                                         v.get(dnnl.ARG_BIAS), *geo, dtype=np.float64)}
            if len(self.post_ops):  # dst held the prior content sum entries read
                from ..reference.post_ops import apply_post_ops
                from .common import operand_entries, post_op_arg

                ops = {i: v[post_op_arg(self.post_ops, i)] for i in operand_entries(self.post_ops)}
                ref[dnnl.ARG_DST] = apply_post_ops(ref[dnnl.ARG_DST], self.post_ops,
                                                   v[dnnl.ARG_DST], ops)
        elif self.direction == "bwd_d":
            ref = {dnnl.ARG_DIFF_SRC: backward_data(
                v[dnnl.ARG_DIFF_DST], v[dnnl.ARG_WEIGHTS], p.src_dims(), *geo,
                dtype=np.float64)}
        else:
            dw, db = backward_weights(v[dnnl.ARG_SRC], v[dnnl.ARG_DIFF_DST], p.weights_dims(),
                                      *geo, with_bias=self.with_bias, dtype=np.float64)
            ref = {dnnl.ARG_DIFF_WEIGHTS: dw}
            if self.with_bias:
                ref[dnnl.ARG_DIFF_BIAS] = db
        err = 0.0
        for arg, r in ref.items():
            got = self.args[arg].to_numpy().astype(np.float64)
            if got.shape != r.shape:
                raise runtime_error(f"conv check: output {arg_name(arg)} has shape "
                                   f"{got.shape}, the reference {r.shape}")
            err = max(err, float(np.max(np.abs(got - r))) / max(float(np.max(np.abs(r))), 1e-30))
        return err


# ---------------------------------------------------------------------------------------------
# PyTorch
# ---------------------------------------------------------------------------------------------
def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _torch_padding(p: ConvProblem):
    """(symmetric padding for torch, explicit (left, right) pads per dim or None).

    torch pads symmetrically; benchdnn's right padding may differ (often it is smaller or
    negative where the last input points are never read, which torch gets by itself)."""
    sym = list(p.padding_l)
    natural = all((i + 2 * pl - ((k - 1) * (d + 1) + 1)) // s + 1 == o
                  for i, pl, k, d, s, o in zip(p.src_spatial, p.padding_l, p.kernel, p.dilates,
                                               p.strides, p.dst_spatial))
    if natural:
        return sym, None
    return [0] * len(sym), [(pl, pr) for pl, pr in zip(p.padding_l, p.padding_r)]


def torch_problem(p: ConvProblem, o: ConvOptions, device: str = "cpu"):
    """``(step, tensors)``: ``step()`` runs the same direction in PyTorch (fp32, default
    contiguous nchw tensors) and returns its outputs (fwd: dst; bwd_d: diff_src; bwd_w:
    diff_weights [OC, IC/G, k...] and diff_bias or None); ``tensors`` holds its inputs ``x``,
    ``w`` (torch's [OC, IC/G, k...]), ``b`` (or None) and ``dy``. None without torch or the
    device. On GPUs float32 without TF32 and ``cudnn.benchmark`` on (cuDNN's own search).
    Forward: ``torch.nn.functional.conv1d/2d/3d``; backward:
    ``torch.ops.aten.convolution_backward`` asking for the wanted gradients only (no autograd
    graph)."""
    if p.deconvolution or o.dt != ("f32",) * 3:
        return None  # the peer comparison covers f32 convolutions only
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    if device == "cuda":
        if not torch.cuda.is_available():
            return None
        torch_tf32("cuda", o.tf32)  # TF32 only where --attr-fpmath allows it for pydnnl too
        # cuDNN times its algorithms per shape first (its find, as ours), FFT ones included
        torch.backends.cudnn.benchmark = True
    direction, _, with_bias = DIRS[o.dir]
    nsp = p.spatial_ndims
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nsp]
    gen = torch.Generator(device="cpu").manual_seed(0)

    def rand(shape):
        return torch.randn(*shape, generator=gen).to(device)

    x, w, dy = rand(p.src_dims()), rand((p.oc, p.ic // p.g, *p.kernel)), rand(p.dst_dims())
    b = rand((p.oc,)) if with_bias and direction == "fwd" else None
    pad, explicit = _torch_padding(p)
    torch_pad: list[int] = []
    if explicit is not None:
        for lo, hi in reversed(explicit):  # F.pad lists the last dim first
            torch_pad += [lo, hi]
    stride, dil = list(p.strides), [d + 1 for d in p.dilates]
    tensors = {"x": x, "w": w, "b": b, "dy": dy}

    if direction == "fwd":
        def step():
            return conv(F.pad(x, torch_pad) if torch_pad else x, w, b, stride, pad, dil, p.g)
        return step, tensors
    mask = [direction == "bwd_d", direction == "bwd_w", direction == "bwd_w" and with_bias]
    # explicit padding: padded once, as a framework keeps the padded tensor of its forward
    # pass; backward data then returns the padded input's gradient, mapped back here by the
    # adjoint of the padding (the negated pads: crop what was added, zero-fill what was cut)
    xin = F.pad(x, torch_pad) if torch_pad else x
    unpad = [-v for v in torch_pad]

    def step():
        dx, dw, db = torch.ops.aten.convolution_backward(
            dy, xin, w, [p.oc] if mask[2] else None, stride, pad, dil, False, [0] * nsp, p.g,
            mask)
        if direction == "bwd_d":
            return F.pad(dx, unpad) if torch_pad else dx
        return dw, db
    return step, tensors


def torch_time(p: ConvProblem, o: ConvOptions, device: str = "cpu",
               min_seconds: float = 1.0) -> tuple[float, float] | None:
    """(min, median) ms of :func:`torch_problem`'s step (TF32 off on CUDA), or None when torch
    or the device is missing."""
    made = torch_problem(p, o, device)
    if made is None:
        return None
    import torch

    step = made[0]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with torch.no_grad():
        for _ in range(2):
            step()
        sync()
        times: list[float] = []
        t_end = time.perf_counter() + min_seconds
        while len(times) < 5 or time.perf_counter() < t_end:
            t0 = time.perf_counter()
            step()
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
            if len(times) >= 1000:
                break
    return min(times), float(np.median(times))


# ---------------------------------------------------------------------------------------------
# one problem
# ---------------------------------------------------------------------------------------------
def run(eng, p: ConvProblem, o: ConvOptions, mode: str, compare: str | None,
        min_seconds: float, raise_unimplemented: bool = False) -> int:
    """Benchmark (mode P) or check (mode C) one problem; prints one line, returns 1 on a
    failed check, else 0. ``raise_unimplemented``: let ``unimplemented`` reach the caller."""
    desc = o.to_str()
    try:
        b = ConvBench(eng, p, o)
    except unimplemented as e:
        if raise_unimplemented:
            raise
        print(f"skip,unimplemented,{desc},{p.to_str()},{e}", flush=True)
        return 0
    if mode == "C":
        err = b.check()
        tol = b.tolerance()
        ok = err <= tol
        print(f"check,{'passed' if ok else 'FAILED'},{desc},{p.to_str()},solver={b.solver},"
              f"max_rel_err={err:.2e},tolerance={tol:.1e}", flush=True)
        return 0 if ok else 1
    times = b.time(min_seconds=min_seconds)
    tmin, tmed = min(times), float(np.median(times))
    gflops = b.flops() / tmin * 1e-6
    line = (f"perf,{desc},{p.to_str()},solver={b.solver},create_ms={b.create_ms:.1f},"
            f"min_ms={tmin:.3f},median_ms={tmed:.3f},gflops={gflops:.1f}")
    if compare == "torch":
        dev = "cuda" if eng.info.is_gpu else "cpu"
        peer = torch_time(p, o, device=dev, min_seconds=min_seconds)
        if peer is None:
            why = ("torch is not installed" if not torch_available() else
                   "deconvolution" if p.deconvolution else
                   "the peer runs f32 only" if o.dt != ("f32",) * 3 else
                   "no CUDA device for torch" if dev == "cuda" else "not comparable")
            line += f",torch=n/a ({why})"
        else:
            line += (f",torch_min_ms={peer[0]:.3f},torch_median_ms={peer[1]:.3f},"
                     f"ratio={peer[0] / tmin:.2f}")
    print(line, flush=True)
    return 0


__all__ = ["DIRS", "ConvOptions", "ConvBench", "parse_dir", "parse_alg", "parse_dt", "dt_option",
           "torch_problem",
           "torch_time", "torch_available", "run"]
