"""benchdnn's bnorm driver: ``--bnorm [--dir=FWD_D|FWD_I|BWD_D|BWD_DW] [--flags=GCHRAS]
[--tag=nchw] [--mb=N] [--inplace=BOOL] mbXicX_idXihXiwX_epsY_nS``.

Flags as benchdnn spells them: ``G`` use_global_stats, ``C`` use_scale, ``H`` use_shift,
``R`` fuse_norm_relu, ``A`` fuse_norm_add_relu (``ARG_SRC_1`` in dst's desc forward,
``ARG_DIFF_SRC_1`` in diff_dst's backward), ``S`` the older use_scaleshift (= ``CH``).
Problem: ``mb`` defaults to 2 and ``eps`` to 1/16; missing smaller spatial dims copy the
largest given (``ih14`` is 14x14, ``id4`` 4x4x4), no spatial dim at all is a 2-D ``N x C``
problem.

Mode C checks every output against the float64 numpy reference (backward: statistics from
the reference, the workspace from the forward primitive). Mode P times the primitive of
``--dir`` alone; ``gbs`` counts each tensor once (src and dst forward; src, diff_dst and
diff_src backward), so a forward that computes statistics, which reads src twice, tops out
near two thirds of ``copy_gbs``; ``A`` adds src_1 (forward) or diff_src_1 (backward).
"""
from __future__ import annotations

import math
import re
import time

import numpy as np

import pydnnl as dnnl

from ..error import invalid_arguments, unimplemented
from ..reference import normalization as ref
from .common import check_line, copy_gbs, perf_line, time_ms, torch_device, torch_time_ms

F = dnnl.normalization_flags
DIRS = {"FWD_D": dnnl.prop_kind.forward_training, "FWD_I": dnnl.prop_kind.forward_inference,
        "BWD_D": dnnl.prop_kind.backward_data, "BWD_DW": dnnl.prop_kind.backward}
_FLAG_CHARS = {"G": F.use_global_stats, "C": F.use_scale, "H": F.use_shift,
               "R": F.fuse_norm_relu, "A": F.fuse_norm_add_relu,
               "S": F.use_scale | F.use_shift}


def parse_flags(text: str, allowed: str) -> F:
    """benchdnn's ``--flags`` letters as normalization_flags."""
    flags = F.none
    for ch in text.upper():
        if ch not in allowed or ch not in _FLAG_CHARS:
            raise invalid_arguments(f"--flags={text}: unknown flag {ch!r}; expected letters of "
                                    f"{allowed}")
        flags |= _FLAG_CHARS[ch]
    return flags


def parse_dir(opts: dict):
    d = opts.get("dir", "FWD_D").upper()
    if d not in DIRS:
        raise invalid_arguments(f"--dir={d}: expected one of {', '.join(DIRS)}")
    return d, DIRS[d]


def parse_problem(text: str, mb_override: int = 0) -> tuple[list[int], float, str]:
    """``mbXicX_idXihXiwX_epsY_nS`` -> (dims [N, C, spatial...], eps, name)."""
    body = text
    name = ""
    m = re.search(r"n(\"[^\"]*\"|[^_\d][^_]*)$", body)
    if m and not re.fullmatch(r"n\d+", m.group(0)):
        name, body = m.group(1).strip('"'), body[:m.start()]
    vals: dict[str, float] = {}
    pos = 0
    body = body.replace("_", "")
    for mm in re.finditer(r"(mb|ic|id|ih|iw)(\d+)|eps(\d*\.?\d+(?:[eE][+-]?\d+)?)", body):
        if mm.start() != pos:
            break
        if mm.group(3) is not None:
            vals["eps"] = float(mm.group(3))
        else:
            vals[mm.group(1)] = int(mm.group(2))
        pos = mm.end()
    if pos != len(body) or "ic" not in vals:
        raise invalid_arguments(f"bnorm problem {text!r}: expected mbXicX_idXihXiwX_epsY_nS "
                                f"(ic required)")
    mb = int(mb_override or vals.get("mb", 2))
    ic = int(vals["ic"])
    id_, ih, iw = (int(vals[k]) if k in vals else 0 for k in ("id", "ih", "iw"))
    if id_:
        sp = [id_, ih or id_, iw or ih or id_]
    elif ih:
        sp = [ih, iw or ih]
    elif iw:
        sp = [iw]
    else:
        sp = []
    dims = [mb, ic] + sp
    if min(dims) < 1:
        raise invalid_arguments(f"bnorm problem {text!r}: every dim must be positive")
    return dims, float(vals.get("eps", 1.0 / 16)), name


def tag_for(opts: dict, nd: int, default: str) -> str:
    """``--tag`` as a format tag of ``nd`` dims (oneDNN names such as nhwc, nChw16c, or
    letters such as acdb); ``abx``/``axb`` as benchdnn spells plain and channels-last."""
    t = opts.get("tag", default)
    if t == "abx":
        return "abcdefghijkl"[:nd]
    if t == "axb":
        return "a" + "cdefghijkl"[:nd - 2] + "b"
    return t


def _bool(opts: dict, key: str) -> bool:
    return opts.get(key, "false").lower() in ("true", "1", "yes")


class BnormBench:
    """One bnorm problem: its primitives, memories and values."""

    def __init__(self, eng, problem: str, opts: dict, seed: int = 0):
        self.eng = eng
        self.dir, self.prop = parse_dir(opts)
        self.flags = parse_flags(opts.get("flags", ""), "GCHRSA")
        self.dims, self.eps, _ = parse_problem(problem, int(opts.get("mb", 0)))
        self.dt = opts.get("dt", "f32").lower()
        if self.dt not in ("f32", "bf16", "f16"):
            raise unimplemented(f"--dt={opts['dt']}: f32, bf16 and f16 are implemented")
        nd = len(self.dims)
        md = dnnl.memory.desc(self.dims, dnnl.memory.data_type[self.dt],
                              tag_for(opts, nd, "abx"))
        self.md = md
        rng = np.random.default_rng(seed)
        C = self.dims[1]
        self.x = (rng.standard_normal(self.dims) * 2 + 1).astype(np.float32)
        self.scale = rng.uniform(0.5, 1.5, C).astype(np.float32)
        self.shift = rng.standard_normal(C).astype(np.float32)
        self.gmean = rng.standard_normal(C).astype(np.float32)
        self.gvar = rng.uniform(0.5, 4, C).astype(np.float32)
        self.dy = rng.standard_normal(self.dims).astype(np.float32)
        self.z = rng.standard_normal(self.dims).astype(np.float32)  # src_1
        fl = self.flags
        self.add = bool(fl & F.fuse_norm_add_relu)
        self.g = bool(fl & F.use_global_stats)
        fwd_prop = self.prop if self.dir.startswith("FWD") else dnnl.prop_kind.forward_training
        t0 = time.perf_counter()
        self.fpd = dnnl.batch_normalization_forward.primitive_desc(eng, fwd_prop, md, md,
                                                                   self.eps, fl)
        self.fwd = dnnl.batch_normalization_forward(self.fpd)
        self.bwd = None
        if not self.dir.startswith("FWD"):
            self.bpd = dnnl.batch_normalization_backward.primitive_desc(
                eng, self.prop, md, md, md, self.eps, fl, self.fpd)
            self.bwd = dnnl.batch_normalization_backward(self.bpd)
        self.create_ms = (time.perf_counter() - t0) * 1e3
        self.inplace = _bool(opts, "inplace") and self.dir.startswith("FWD")
        self._memories()

    def _memories(self) -> None:
        eng, pd = self.eng, self.fpd

        def mem(m, v=None):
            return dnnl.memory(m, eng, v) if v is not None else dnnl.memory(m, eng)
        a = {dnnl.ARG_SRC: mem(self.md, self.x)}
        self.x = a[dnnl.ARG_SRC].to_numpy().astype(np.float32)  # as stored
        a[dnnl.ARG_DST] = a[dnnl.ARG_SRC] if self.inplace else mem(self.md)
        specs = pd.arg_specs()
        if self.add:
            a[dnnl.ARG_SRC_1] = mem(pd.dst_desc(3), self.z)
            self.z = a[dnnl.ARG_SRC_1].to_numpy().astype(np.float32)  # as stored
        if dnnl.ARG_MEAN in specs:
            a[dnnl.ARG_MEAN] = mem(pd.mean_desc(), self.gmean if self.g else None)
            a[dnnl.ARG_VARIANCE] = mem(pd.variance_desc(), self.gvar if self.g else None)
        if dnnl.ARG_SCALE in specs:
            a[dnnl.ARG_SCALE] = mem(pd.weights_desc(), self.scale)
        if dnnl.ARG_SHIFT in specs:
            a[dnnl.ARG_SHIFT] = mem(pd.weights_desc(), self.shift)
        if dnnl.ARG_WORKSPACE in specs:
            a[dnnl.ARG_WORKSPACE] = mem(pd.workspace_desc())
        self.fargs = a
        if self.bwd is None:
            return
        bpd = self.bpd
        b = {k: a[k] for k in (dnnl.ARG_SRC, dnnl.ARG_MEAN, dnnl.ARG_VARIANCE, dnnl.ARG_SCALE,
                                dnnl.ARG_SHIFT, dnnl.ARG_WORKSPACE) if k in bpd.arg_specs()}
        b[dnnl.ARG_DIFF_DST] = mem(self.md, self.dy)
        self.dy = b[dnnl.ARG_DIFF_DST].to_numpy().astype(np.float32)
        b[dnnl.ARG_DIFF_SRC] = mem(self.md)
        if self.add:
            b[dnnl.ARG_DIFF_SRC_1] = mem(bpd.diff_dst_desc(1))
        for k in (dnnl.ARG_DIFF_SCALE, dnnl.ARG_DIFF_SHIFT):
            if k in bpd.arg_specs():
                b[k] = mem(bpd.diff_weights_desc())
        self.bargs = b

    def run(self):
        s = dnnl.stream(self.eng)
        self.fwd.execute(s, self.fargs)
        if self.bwd is not None:
            self.bwd.execute(s, self.bargs)
        s.wait()
        return s

    def check(self) -> float:
        """Largest error over the outputs, each relative to its largest reference value."""
        self.run()
        fl = self.flags
        sc = self.scale if fl & F.use_scale else None
        sh = self.shift if fl & F.use_shift else None
        relu = bool(fl & (F.fuse_norm_relu | F.fuse_norm_add_relu))
        y, m, v = ref.batch_norm_forward(self.x, self.eps, self.gmean if self.g else None,
                                         self.gvar if self.g else None, sc, sh, relu,
                                         self.z if self.add else None)
        pairs = []
        if self.bwd is None:
            pairs.append((self.fargs[dnnl.ARG_DST].to_numpy(), y))
            if dnnl.ARG_MEAN in self.fargs and not self.g:
                pairs += [(self.fargs[dnnl.ARG_MEAN].to_numpy(), m),
                          (self.fargs[dnnl.ARG_VARIANCE].to_numpy(), v)]
            if dnnl.ARG_WORKSPACE in self.fargs:
                ws = self.fargs[dnnl.ARG_WORKSPACE].to_numpy()[:y.size].reshape(y.shape)
                pairs.append(((ws != 0).astype(np.float64), (y > 0).astype(np.float64)))
        else:
            mean = self.fargs[dnnl.ARG_MEAN].to_numpy()
            var = self.fargs[dnnl.ARG_VARIANCE].to_numpy()
            mask = None
            if relu:
                ws = self.fargs[dnnl.ARG_WORKSPACE].to_numpy()[:y.size].reshape(y.shape)
                mask = ws != 0
            dx, dsc, dsh = ref.batch_norm_backward(self.x, self.dy, mean, var, self.eps, sc,
                                                   self.g, mask)
            pairs.append((self.bargs[dnnl.ARG_DIFF_SRC].to_numpy(), dx))
            if self.add:  # the masked diff_dst
                pairs.append((self.bargs[dnnl.ARG_DIFF_SRC_1].to_numpy(),
                              np.where(mask, self.dy, 0.0)))
            if dnnl.ARG_DIFF_SCALE in self.bargs:
                pairs.append((self.bargs[dnnl.ARG_DIFF_SCALE].to_numpy(), dsc))
            if dnnl.ARG_DIFF_SHIFT in self.bargs:
                pairs.append((self.bargs[dnnl.ARG_DIFF_SHIFT].to_numpy(), dsh))
        return max(float(np.abs(g - w).max() / max(1.0, float(np.abs(w).max())))
                   for g, w in pairs)

    def tensors(self) -> int:
        """How many full tensors the timed primitive moves: src and dst forward; src,
        diff_dst and diff_src backward; plus src_1 or diff_src_1 with ``A``."""
        return (3 if self.bwd is not None else 2) + self.add

    def nbytes(self) -> int:
        n = math.prod(self.dims) * self.md.get_size() // math.prod(self.dims)
        return self.tensors() * n


def _torch_ms(b: BnormBench, min_seconds: float) -> float | None:
    dev = torch_device(b.eng)
    if dev is None:
        return None
    import torch

    x = torch.tensor(b.x, device=dev)
    C = b.dims[1]
    rm, rv = torch.zeros(C, device=dev), torch.ones(C, device=dev)
    w, bias = torch.tensor(b.scale, device=dev), torch.tensor(b.shift, device=dev)
    # batch statistics in forward training and in the backward's forward
    training = not b.g and (b.dir == "FWD_D" or b.bwd is not None)
    z = torch.tensor(b.z, device=dev) if b.add else None

    def fwd(xv, wv):
        out = torch.nn.functional.batch_norm(xv, rm, rv, wv, bias, training=training,
                                             eps=b.eps)
        return torch.relu(out + z) if z is not None else out
    if b.bwd is None:
        return torch_time_ms(lambda: fwd(x, w), dev, min_seconds)
    xg = x.clone().requires_grad_(True)
    wg = w.clone().requires_grad_(True)
    dy = torch.tensor(b.dy, device=dev)

    def step():
        with torch.enable_grad():
            torch.autograd.grad(fwd(xg, wg), (xg, wg), dy)
    return torch_time_ms(step, dev, min_seconds)


def run(eng, problem: str, opts: dict, mode: str, compare: str | None,
        min_seconds: float) -> int:
    """Run one bnorm problem; returns the number of failures."""
    b = BnormBench(eng, problem, opts)
    desc = (f"--dt={b.dt} --dir={b.dir} --flags={opts.get('flags', '')} "
            f"--tag={b.md.format_name()}")
    if mode == "C":
        # f32 arithmetic, then one rounding of dst/diff_src to the storage type
        tol = {"f32": 2e-5, "bf16": 2.0 ** -8, "f16": 2.0 ** -11}[b.dt]
        line, failed = check_line("bnorm", desc, problem, b.check(), tol)
        print(line, flush=True)
        return failed
    if b.bwd is not None:
        b.run()  # statistics and workspace for the timed backward
        prim, args = b.bwd, b.bargs
    else:
        prim, args = b.fwd, b.fargs
    s = dnnl.stream(eng)
    tmin, tmed = time_ms(lambda: prim.execute(s, args), min_seconds, s.wait)
    peer = None
    if compare == "torch":
        peer = ("torch", _torch_ms(b, min_seconds))
    nbytes = b.nbytes()
    print(perf_line("bnorm", desc, problem, b.create_ms, tmin, tmed, nbytes=nbytes, peer=peer,
                    copy=copy_gbs(eng, nbytes // b.tensors())),
          flush=True)
    return 0
