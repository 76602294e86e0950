"""benchdnn's matmul driver: ``--matmul [--bia_dt=f32] [--bia_mask=M] [--stag=any] [--wtag=any]
[--dtag=any] [--attr-post-ops=...] MxK:KxN[:MxN]`` (batch dims too: ``2x3x4x5:2x1x5x6``).

Checked against numpy in float64 (mode C); timed against numpy (OpenBLAS or whatever numpy
runs, ``--compare=numpy``) or PyTorch (``--compare=torch``, TF32 off on CUDA), both from
minimum times of batches of queued calls.
"""
from __future__ import annotations

import time

import numpy as np

import pydnnl as dnnl

from ..error import invalid_arguments
from .common import (
    TF32_RTOL,
    check_line,
    fpmath_attr,
    parse_dims_list,
    parse_post_ops,
    perf_line,
    post_op_operands,
    random_args,
    time_ms,
    torch_device,
    torch_tf32,
    torch_time_ms,
)


def _tag(opts: dict, key: str, nd: int) -> str:
    """A tag option; benchdnn's default is ``any`` (the primitive's choice)."""
    t = opts.get(key, "any")
    if t in ("any", "abx"):
        return "abcdefghijkl"[:nd] if t != "any" else "any"
    if len(t) != nd:
        raise invalid_arguments(f"--{key}={t}: expected a tag of {nd} dims")
    return t


class MatmulBench:
    """One matmul problem's primitive, memories and values."""

    def __init__(self, eng, problem: str, opts: dict, seed: int = 0):
        dims = parse_dims_list(problem)
        if len(dims) not in (2, 3):
            raise invalid_arguments(f"matmul problem {problem!r}: expected src:wei[:dst]")
        sd, wd = dims[0], dims[1]
        if len(sd) != len(wd) or sd[-1] != wd[-2]:
            raise invalid_arguments(f"matmul problem {problem!r}: src {sd} and weights {wd} do "
                                    f"not multiply")
        dd = dims[2] if len(dims) == 3 else [max(a, b) for a, b in zip(sd[:-2], wd[:-2])] + [
            sd[-2], wd[-1]]
        nd = len(dd)
        MD, F32 = dnnl.memory.desc, dnnl.memory.data_type.f32
        descs = [MD(sd, F32, _tag(opts, "stag", nd)), MD(wd, F32, _tag(opts, "wtag", nd))]
        self.with_bias = opts.get("bia_dt", opts.get("bia-dt", "undef")).lower() == "f32"
        if self.with_bias:
            mask = int(opts.get("bia_mask", opts.get("bia-mask", 1 << (nd - 1))))
            descs.append(MD([d if mask >> i & 1 else 1 for i, d in enumerate(dd)], F32,
                            "abcdefghijkl"[:nd]))
        descs.append(MD(dd, F32, _tag(opts, "dtag", nd)))
        self.post_ops = parse_post_ops(opts.get("attr-post-ops", ""), dd, oc_dim=nd - 1)
        attr = dnnl.primitive_attr()
        attr.set_post_ops(self.post_ops)
        self.tf32 = fpmath_attr(opts, attr)
        t0 = time.perf_counter()
        self.pd = dnnl.matmul.primitive_desc(eng, *descs, attr)
        self.prim = dnnl.matmul(self.pd)
        self.create_ms = (time.perf_counter() - t0) * 1e3
        self.dims = (sd, wd, dd)
        self.values, self.args = random_args(self.pd, eng, seed)
        self.stream = dnnl.stream(eng)

    def run(self) -> None:
        self.prim.execute(self.stream, self.args)

    def flops(self) -> float:
        sd, wd, dd = self.dims
        return 2.0 * np.prod(dd) * sd[-1]

    def check(self) -> float:
        from ..primitives.post_ops import binary_arg
        from ..reference.post_ops import apply_post_ops

        prior = self.values[dnnl.ARG_DST]
        self.run()
        self.stream.wait()
        v = self.values
        ref = np.matmul(v[dnnl.ARG_SRC].astype(np.float64), v[dnnl.ARG_WEIGHTS])
        if self.with_bias:
            ref = ref + v[dnnl.ARG_BIAS]
        ops = {i: v[binary_arg(i)] for i in post_op_operands(self.post_ops)}
        ref = apply_post_ops(ref, self.post_ops, prior, ops)
        got = self.args[dnnl.ARG_DST].to_numpy()
        return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def _peer(b: MatmulBench, compare: str | None, eng, min_seconds: float):
    sd, wd, dd = b.dims
    if compare == "numpy":
        x, w = b.values[dnnl.ARG_SRC], b.values[dnnl.ARG_WEIGHTS]
        out = np.empty(dd, np.float32)
        return "numpy", time_ms(lambda: np.matmul(x, w, out=out), min_seconds)[0]
    if compare == "torch":
        dev = torch_device(eng)
        if dev is None:
            return "torch", None
        import torch

        torch_tf32(dev, b.tf32)
        x = torch.tensor(b.values[dnnl.ARG_SRC], device=dev)
        w = torch.tensor(b.values[dnnl.ARG_WEIGHTS], device=dev)
        out = torch.empty(dd, device=dev)
        return "torch", torch_time_ms(lambda: torch.matmul(x, w, out=out), dev, min_seconds)
    return None


def run(eng, problem: str, opts: dict, mode: str, compare: str | None,
        min_seconds: float) -> int:
    b = MatmulBench(eng, problem, opts)
    desc = " ".join(f"--{k}={v}" for k, v in sorted(opts.items()))
    if mode == "C":
        line, failed = check_line("matmul", desc, problem, b.check(), (
            TF32_RTOL if b.tf32 else 1e-5) * max(1.0, np.sqrt(b.dims[0][-1] / 1024)))
        print(line, flush=True)
        return failed
    tmin, tmed = time_ms(b.run, min_seconds, b.stream.wait)
    print(perf_line("matmul", desc, problem, b.create_ms, tmin, tmed, flops=b.flops(),
                    peer=_peer(b, compare, eng, min_seconds)), flush=True)
    return 0
