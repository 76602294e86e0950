"""benchdnn's inner product driver: ``--ip [--dir=FWD_B|FWD_D|FWD_I|BWD_D|BWD_W|BWD_WB]
[--dt=f32|u8:s8:s8] [--attr-scales=src:common:0.5+wei:per_oc+dst:common:2]
[--attr-post-ops=...] mb64ic512oc2048`` (spatial input too: ``mb2ic16ih7iw7oc10``;
``--dt`` and ``--attr-scales`` as in the matmul driver: u8 or s8 src makes an int8 forward,
with small integer data, an f32 bias, and mode C checking oneDNN's quantized formula).

Tensors are created with ``format_tag.any``. Checked against numpy in float64 (mode C); timed
against numpy's matmul of the same product (``--compare=numpy``) or PyTorch's
``linear`` (``--compare=torch``, TF32 off on CUDA).
"""
from __future__ import annotations

import re
import time

import numpy as np

import pydnnl as dnnl

from ..error import invalid_arguments
from .common import (
    check_line,
    fpmath_attr,
    fpmath_rtol,
    parse_post_ops,
    perf_line,
    random_args,
    store_rtol,
    time_ms,
    torch_device,
    torch_tf32,
    torch_time_ms,
)
from .matmul import (
    apply_scales,
    int8_args,
    int8_error,
    parse_dt,
    parse_scales,
    parse_zero_points,
    scale_values,
    set_scales,
    set_zero_points,
)

DIRS = ("FWD_B", "FWD_D", "FWD_I", "BWD_D", "BWD_W", "BWD_WB")


def parse(problem: str) -> tuple[int, int, list[int], int]:
    """``(mb, ic, spatial, oc)`` of ``mb64ic512[id..][ih..][iw..]oc2048``."""
    fields = dict(re.findall(r"(mb|ic|id|ih|iw|oc)(\d+)", problem))
    rest = re.sub(r"(mb|ic|id|ih|iw|oc)\d+|_|n\"[^\"]*\"", "", problem)
    if rest or "ic" not in fields or "oc" not in fields:
        raise invalid_arguments(f"ip problem {problem!r}: expected mb<N>ic<C>[id..ih..iw..]oc<K>")
    sp = [int(fields[k]) for k in ("id", "ih", "iw") if k in fields]
    if "ih" in fields and "iw" not in fields:
        sp.append(int(fields["ih"]))
    return int(fields.get("mb", 2)), int(fields["ic"]), sp, int(fields["oc"])


class IpBench:
    def __init__(self, eng, problem: str, opts: dict, seed: int = 0):
        d = opts.get("dir", "FWD_B").upper()
        if d not in DIRS:
            raise invalid_arguments(f"--dir: expected one of {', '.join(DIRS)}, got {d}")
        mb, ic, sp, oc = parse(problem)
        self.dir, self.shape = d, (mb, ic, sp, oc)
        MD, F32, ANY = dnnl.memory.desc, dnnl.memory.data_type.f32, "any"
        self.dts = parse_dt(opts.get("dt", ""))
        self.int8 = self.dts[0].name in ("u8", "s8")
        src, wei = MD([mb, ic, *sp], self.dts[0], ANY), MD([oc, ic, *sp], self.dts[1], ANY)
        dst = MD([mb, oc], self.dts[2], ANY)
        bias = MD([oc], F32, ANY) if d in ("FWD_B", "BWD_WB") else None
        self.post_ops = parse_post_ops(opts.get("attr-post-ops", ""), [mb, oc])
        attr = dnnl.primitive_attr()
        attr.set_post_ops(self.post_ops)
        self.scales = parse_scales(opts.get("attr-scales", ""), {
            dnnl.ARG_SRC: [mb, ic, *sp], dnnl.ARG_WEIGHTS: [oc, ic, *sp],
            dnnl.ARG_DST: [mb, oc]}, {dnnl.ARG_SRC: 1, dnnl.ARG_WEIGHTS: 0, dnnl.ARG_DST: 1})
        set_scales(attr, self.scales)
        zps = parse_zero_points(opts.get("attr-zero-points", ""), {
            dnnl.ARG_SRC: [mb, ic, *sp], dnnl.ARG_WEIGHTS: [oc, ic, *sp],
            dnnl.ARG_DST: [mb, oc]}, {dnnl.ARG_SRC: 1, dnnl.ARG_WEIGHTS: 0, dnnl.ARG_DST: 1})
        set_zero_points(attr, zps)  # oneDNN's inner product refuses them, as pydnnl
        self.tf32 = fpmath_attr(opts, attr)
        prop = (dnnl.prop_kind.forward_inference if d == "FWD_I"
                else dnnl.prop_kind.forward_training)
        t0 = time.perf_counter()
        fwd = dnnl.inner_product_forward.primitive_desc(
            eng, prop, src, wei, bias, dst, attr if d.startswith("FWD") else None)
        if d.startswith("FWD"):
            self.pd, cls = fwd, dnnl.inner_product_forward
        elif d == "BWD_D":
            self.pd = dnnl.inner_product_backward_data.primitive_desc(eng, src, wei, dst, fwd,
                                                                      attr)
            cls = dnnl.inner_product_backward_data
        else:
            self.pd = dnnl.inner_product_backward_weights.primitive_desc(eng, src, wei, bias,
                                                                         dst, fwd, attr)
            cls = dnnl.inner_product_backward_weights
        self.prim = cls(self.pd)
        self.create_ms = (time.perf_counter() - t0) * 1e3
        self.values, self.args = (int8_args if self.int8 else random_args)(self.pd, eng, seed)
        self.scale_vals = scale_values(self, self.scales)
        self.stream = dnnl.stream(eng)

    def run(self) -> None:
        self.prim.execute(self.stream, self.args)

    def flops(self) -> float:
        mb, ic, sp, oc = self.shape
        return 2.0 * mb * oc * ic * int(np.prod(sp))

    def check(self) -> float:
        from .common import operand_entries, post_op_arg

        prior = self.values.get(dnnl.ARG_DST)
        self.run()
        self.stream.wait()
        v, mb, oc = self.values, self.shape[0], self.shape[3]
        A = dnnl
        if self.dir.startswith("FWD"):
            x, w = v[A.ARG_SRC].reshape(mb, -1).astype(np.float64), v[A.ARG_WEIGHTS]
            ops = {i: v[post_op_arg(self.post_ops, i)] for i in operand_entries(self.post_ops)}
            # the forward's masks: 0, or per output channel for weights (a row of dst)
            shaped = {a: s.reshape(1, -1) for a, s in self.scale_vals.items()}
            if self.int8:
                from ..reference.inner_product import inner_product_int8
                from ..reference.post_ops import apply_post_ops

                one = np.ones(1)
                y = inner_product_int8(
                    v[A.ARG_SRC], v[A.ARG_WEIGHTS], v.get(A.ARG_BIAS),
                    shaped.get(A.ARG_SRC, one), shaped.get(A.ARG_WEIGHTS, one),
                    shaped.get(A.ARG_DST, one),
                    post_ops=lambda t: apply_post_ops(t, self.post_ops, prior, ops))
                return int8_error(self.args[A.ARG_DST].to_numpy(), y, self.dts[2])
            ref = {A.ARG_DST: apply_scales(x @ w.reshape(oc, -1).T, v.get(A.ARG_BIAS, 0.0),
                                           self.post_ops, prior, ops, shaped)}
        elif self.dir == "BWD_D":
            dy = v[A.ARG_DIFF_DST].astype(np.float64)
            w = v[A.ARG_WEIGHTS]
            ref = {A.ARG_DIFF_SRC: (dy @ w.reshape(oc, -1)).reshape(w.shape[0:0] + (
                mb,) + w.shape[1:])}
        else:
            dy = v[A.ARG_DIFF_DST].astype(np.float64)
            x = v[A.ARG_SRC]
            ref = {A.ARG_DIFF_WEIGHTS: (dy.T @ x.reshape(mb, -1)).reshape((oc,) + x.shape[1:])}
            if self.dir == "BWD_WB":
                ref[A.ARG_DIFF_BIAS] = dy.sum(0)
        err = 0.0
        for arg, r in ref.items():
            got = self.args[arg].to_numpy()
            err = max(err, float(np.abs(got - r).max() / max(np.abs(r).max(), 1e-30)))
        return err


def _peer(b: IpBench, compare, eng, min_seconds):
    mb, ic, sp, oc = b.shape
    k = ic * int(np.prod(sp))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((mb, k)).astype(np.float32)
    w = rng.standard_normal((oc, k)).astype(np.float32)
    if compare == "numpy":  # the forward's product; the backward ones have the same flops
        out = np.empty((mb, oc), np.float32)
        wt = w.T
        return "numpy", time_ms(lambda: np.matmul(x, wt, out=out), min_seconds)[0]
    if compare == "torch":
        dev = torch_device(eng)
        if dev is None:
            return "torch", None
        import torch

        torch_tf32(dev, b.tf32)
        tx, tw = torch.tensor(x, device=dev), torch.tensor(w, device=dev)
        tb = torch.zeros(oc, device=dev) if b.dir == "FWD_B" else None  # the same bias work
        return "torch", torch_time_ms(lambda: torch.nn.functional.linear(tx, tw, tb), dev,
                                      min_seconds)
    return None


def run(eng, problem: str, opts: dict, mode: str, compare, min_seconds: float) -> int:
    b = IpBench(eng, problem, opts)
    desc = " ".join(f"--{k}={v}" for k, v in sorted(opts.items()))
    if mode == "C":
        err, tol = b.check(), fpmath_rtol(b.tf32, 1e-5) * max(
            1.0, np.sqrt(b.flops() / (2 * b.shape[0] * b.shape[3]) / 1024)) + store_rtol(b.dts)
        if b.int8:
            err, tol = err
        line, failed = check_line("ip", desc, problem, err, tol)
        print(line, flush=True)
        return failed
    if mode == "K":
        from .common import kernel_profile

        b.eng = eng
        for name, size, count, ms in kernel_profile(b):
            print(f"kernel,--ip {desc},{problem},impl={b.pd.impl_info_str()},{name},"
                  f"global={'x'.join(map(str, size or ()))},launches={count},"
                  f"total_ms={ms:.4f},per_launch_us={ms / count * 1e3:.2f}", flush=True)
        return 0
    tmin, tmed = time_ms(b.run, min_seconds, b.stream.wait)
    print(perf_line("ip", desc, problem, b.create_ms, tmin, tmed, flops=b.flops(),
                    peer=_peer(b, compare, eng, min_seconds)), flush=True)
    return 0
