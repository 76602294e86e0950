"""benchdnn's lnorm driver: ``--lnorm [--dir=FWD_D|FWD_I|BWD_D|BWD_DW] [--flags=GCHS]
[--sdt=f32|bf16|f16] [--ddt=...] [--dt=...] [--tag=abx] [--stat_tag=abx] [--inplace=BOOL]
TxNxC`` (fewer dims allowed: ``NxC``; ``--dt`` sets both types; backward: diff_dst of
``--ddt``, diff_src of ``--sdt``).

Flags as benchdnn spells them: ``G`` use_global_stats, ``C`` use_scale, ``H`` use_shift,
``S`` the older use_scaleshift (= ``CH``); ``eps`` is 1/16 as in benchdnn. Mode C checks every
output against the float64 numpy reference; mode P times the primitive of ``--dir`` alone,
``gbs`` counting each tensor once (src and dst forward; src, diff_dst, diff_src backward).
"""
from __future__ import annotations

import math
import time

import numpy as np

import pydnnl as dnnl

from ..error import unimplemented
from ..reference import normalization as ref
from .bnorm import parse_dir, parse_flags
from .common import (
    check_line,
    copy_gbs,
    parse_dims,
    perf_line,
    time_ms,
    torch_device,
    torch_time_ms,
)
from .softmax import TOLERANCES

F = dnnl.normalization_flags
EPS = 1.0 / 16


def _tag(opts: dict, key: str, nd: int) -> str:
    t = opts.get(key, "abx")
    return "abcdefghijkl"[:nd] if t == "abx" else t


class LnormBench:
    """One lnorm problem: its primitives, memories and values."""

    def __init__(self, eng, problem: str, opts: dict, seed: int = 0):
        self.eng = eng
        self.dir, self.prop = parse_dir(opts)
        self.flags = parse_flags(opts.get("flags", ""), "GCHS")
        self.dims = parse_dims(problem)
        dt0 = opts.get("dt", "f32")
        self.sdt, self.ddt = opts.get("sdt", dt0), opts.get("ddt", dt0)
        for n, v in (("sdt", self.sdt), ("ddt", self.ddt)):
            if v not in ("f32", "bf16", "f16"):
                raise unimplemented(f"--{n}={v}: f32, bf16 and f16 are implemented")
        nd = len(self.dims)
        DT = dnnl.memory.data_type
        self.md = dnnl.memory.desc(self.dims, DT[self.sdt], _tag(opts, "tag", nd))
        self.dmd = dnnl.memory.desc(self.dims, DT[self.ddt], _tag(opts, "tag", nd))
        stat_md = dnnl.memory.desc(self.dims[:-1], dnnl.memory.data_type.f32,
                                   _tag(opts, "stat_tag", nd - 1))
        rng = np.random.default_rng(seed)
        C, lead = self.dims[-1], self.dims[:-1]
        self.x = (rng.standard_normal(self.dims) * 2 + 1).astype(np.float32)
        self.dy = rng.standard_normal(self.dims).astype(np.float32)
        self.scale = rng.uniform(0.5, 1.5, C).astype(np.float32)
        self.shift = rng.standard_normal(C).astype(np.float32)
        self.gmean = rng.standard_normal(lead).astype(np.float32)
        self.gvar = rng.uniform(0.5, 4, lead).astype(np.float32)
        self.g = bool(self.flags & F.use_global_stats)
        fwd = self.dir.startswith("FWD")
        t0 = time.perf_counter()
        self.fpd = dnnl.layer_normalization_forward.primitive_desc(
            eng, self.prop if fwd else dnnl.prop_kind.forward_training, self.md, self.dmd,
            stat_md, EPS, self.flags)
        self.fwd = dnnl.layer_normalization_forward(self.fpd)
        self.bwd = None
        if not fwd:
            self.bpd = dnnl.layer_normalization_backward.primitive_desc(
                eng, self.prop, self.md, self.dmd, self.md, stat_md, EPS, self.flags, self.fpd)
            self.bwd = dnnl.layer_normalization_backward(self.bpd)
        self.create_ms = (time.perf_counter() - t0) * 1e3
        inplace = (opts.get("inplace", "false").lower() in ("true", "1") and fwd
                   and self.sdt == self.ddt)
        self._memories(inplace)

    def _memories(self, inplace: bool) -> None:
        eng, pd = self.eng, self.fpd

        def mem(m, v=None):
            return dnnl.memory(m, eng, v) if v is not None else dnnl.memory(m, eng)
        a = {dnnl.ARG_SRC: mem(self.md, self.x)}
        self.x = a[dnnl.ARG_SRC].to_numpy().astype(np.float32)  # as stored
        a[dnnl.ARG_DST] = a[dnnl.ARG_SRC] if inplace else mem(self.dmd)
        specs = pd.arg_specs()
        if dnnl.ARG_MEAN in specs:
            a[dnnl.ARG_MEAN] = mem(pd.mean_desc(), self.gmean if self.g else None)
            a[dnnl.ARG_VARIANCE] = mem(pd.variance_desc(), self.gvar if self.g else None)
        if dnnl.ARG_SCALE in specs:
            a[dnnl.ARG_SCALE] = mem(pd.weights_desc(), self.scale)
        if dnnl.ARG_SHIFT in specs:
            a[dnnl.ARG_SHIFT] = mem(pd.weights_desc(), self.shift)
        self.fargs = a
        if self.bwd is None:
            return
        b = {k: a[k] for k in (dnnl.ARG_SRC, dnnl.ARG_MEAN, dnnl.ARG_VARIANCE, dnnl.ARG_SCALE,
                                dnnl.ARG_SHIFT) if k in self.bpd.arg_specs()}
        b[dnnl.ARG_DIFF_DST] = mem(self.dmd, self.dy)
        self.dy = b[dnnl.ARG_DIFF_DST].to_numpy().astype(np.float32)  # as stored
        b[dnnl.ARG_DIFF_SRC] = mem(self.md)
        for k in (dnnl.ARG_DIFF_SCALE, dnnl.ARG_DIFF_SHIFT):
            if k in self.bpd.arg_specs():
                b[k] = mem(self.bpd.diff_weights_desc())
        self.bargs = b

    def run(self) -> None:
        s = dnnl.stream(self.eng)
        self.fwd.execute(s, self.fargs)
        if self.bwd is not None:
            self.bwd.execute(s, self.bargs)
        s.wait()

    def check(self) -> float:
        """Largest error over the outputs, each relative to its largest reference value."""
        self.run()
        fl = self.flags
        sc = self.scale if fl & F.use_scale else None
        sh = self.shift if fl & F.use_shift else None
        y, m, v = ref.layer_norm_forward(self.x, EPS, self.gmean if self.g else None,
                                         self.gvar if self.g else None, sc, sh)
        if self.bwd is None:
            pairs = [(self.fargs[dnnl.ARG_DST].to_numpy(), y)]
            if dnnl.ARG_MEAN in self.fargs and not self.g:
                pairs += [(self.fargs[dnnl.ARG_MEAN].to_numpy(), m),
                          (self.fargs[dnnl.ARG_VARIANCE].to_numpy(), v)]
        else:
            dx, dsc, dsh = ref.layer_norm_backward(
                self.x, self.dy, self.fargs[dnnl.ARG_MEAN].to_numpy(),
                self.fargs[dnnl.ARG_VARIANCE].to_numpy(), EPS, sc, self.g)
            pairs = [(self.bargs[dnnl.ARG_DIFF_SRC].to_numpy(), dx)]
            if dnnl.ARG_DIFF_SCALE in self.bargs:
                pairs.append((self.bargs[dnnl.ARG_DIFF_SCALE].to_numpy(), dsc))
            if dnnl.ARG_DIFF_SHIFT in self.bargs:
                pairs.append((self.bargs[dnnl.ARG_DIFF_SHIFT].to_numpy(), dsh))
        return max(float(np.abs(g - w).max() / max(1.0, float(np.abs(w).max())))
                   for g, w in pairs)


def _torch_ms(b: LnormBench, min_seconds: float) -> float | None:
    dev = torch_device(b.eng)
    if dev is None:
        return None
    import torch

    x = torch.tensor(b.x, device=dev)
    w, bias = torch.tensor(b.scale, device=dev), torch.tensor(b.shift, device=dev)
    C = b.dims[-1]
    if b.bwd is None:
        return torch_time_ms(lambda: torch.nn.functional.layer_norm(x, (C,), w, bias, EPS),
                             dev, min_seconds)
    xg, dy = x.clone().requires_grad_(True), torch.tensor(b.dy, device=dev)

    def step():
        with torch.enable_grad():
            out = torch.nn.functional.layer_norm(xg, (C,), w, bias, EPS)
            torch.autograd.grad(out, (xg,), dy)
    return torch_time_ms(step, dev, min_seconds)


def run(eng, problem: str, opts: dict, mode: str, compare: str | None,
        min_seconds: float) -> int:
    """Run one lnorm problem; returns the number of failures."""
    b = LnormBench(eng, problem, opts)
    desc = (f"--dir={b.dir} --flags={opts.get('flags', '')} --sdt={b.sdt} --ddt={b.ddt} "
            f"--tag={b.md.format_name()}")
    if mode == "C":
        # a bf16/f16 output: its type's epsilon (its rounding is half of it)
        tol = max(2e-5, *(TOLERANCES[t] for t in (b.sdt, b.ddt)))
        line, failed = check_line("lnorm", desc, problem, b.check(), tol)
        print(line, flush=True)
        return failed
    if b.bwd is not None:
        b.run()
        prim, args = b.bwd, b.bargs
    else:
        prim, args = b.fwd, b.fargs
    s = dnnl.stream(eng)
    tmin, tmed = time_ms(lambda: prim.execute(s, args), min_seconds, s.wait)
    peer = ("torch", _torch_ms(b, min_seconds)) if compare == "torch" else None
    n = math.prod(b.dims)
    isz, osz = b.md.data_type.itemsize, b.dmd.data_type.itemsize
    nbytes = n * (2 * isz + osz if b.bwd is not None else isz + osz)
    n *= isz
    print(perf_line("lnorm", desc, problem, b.create_ms, tmin, tmed, nbytes=nbytes, peer=peer,
                    copy=copy_gbs(eng, n)), flush=True)
    return 0
