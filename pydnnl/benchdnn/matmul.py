"""benchdnn's matmul driver: ``--matmul [--dt=f32|u8:s8:s8] [--bia_dt=f32] [--bia_mask=M]
[--stag=any] [--wtag=any] [--dtag=any] [--attr-scales=src:common:0.5+wei:per_oc+dst:common:2]
[--attr-zero-points=src:common:2+dst:common:1] [--attr-post-ops=...] MxK:KxN[:MxN]`` (batch
dims too: ``2x3x4x5:2x1x5x6``).

``--dt`` is ``src:wei:dst`` (one type: all three); u8 or s8 src makes an int8 matmul, whose
tensors get small integers (src 0..8 or -4..4, weights -4..4, as benchdnn keeps int8 data
small) and whose ``--attr-zero-points`` (benchdnn's ``ARG:POLICY:ZEROPOINT`` entries: common or
per_oc) are checked in mode C with oneDNN's quantized formula
(:func:`pydnnl.reference.matmul.matmul_int8`, rounded and saturated into dst's type): a
quantized dst may differ by one unit where the exact value is a rounding tie away.

``--attr-scales`` takes benchdnn's ``ARG:POLICY[:SCALE[:f32]]`` entries joined by ``+``
(:func:`parse_scales`); mode C checks oneDNN's formula ``post_ops(src_scale * wei_scale *
(src @ wei) + bias) / dst_scale``.

Checked against numpy in float64 (mode C); timed against numpy (OpenBLAS or whatever numpy
runs, ``--compare=numpy``) or PyTorch (``--compare=torch``, TF32 off on CUDA), both from
minimum times of batches of queued calls.
"""
from __future__ import annotations

import time

import numpy as np

import pydnnl as dnnl

from ..error import invalid_arguments, unimplemented
from .common import (
    argument_memory,
    check_line,
    fpmath_attr,
    fpmath_rtol,
    parse_dims_list,
    parse_post_ops,
    perf_line,
    random_args,
    store_rtol,
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


_SCALE_ARGS = {"src": dnnl.ARG_SRC, "wei": dnnl.ARG_WEIGHTS, "dst": dnnl.ARG_DST}
# per-index scales are the given scale times these, cycled (powers of two: exact in f32)
_SCALE_STEPS = (1.0, 0.5, 2.0, 4.0)


class QuantEntry(tuple):
    """One ``--attr-scales`` / ``--attr-zero-points`` entry: the pair ``(mask, value)``, with
    ``host`` (benchdnn's ``host_scalar`` policy: mask 0, the value passed in a host-scalar
    memory) and ``dt`` (the data type named in the entry, "" for the default)."""

    def __new__(cls, mask: int, value, host: bool = False, dt: str = ""):
        e = super().__new__(cls, (mask, value))
        e.host, e.dt = host, dt
        return e


# data types an entry may name: (in a device memory, as a host scalar)
_QUANT_DTS = {"--attr-scales": (("f32",), ("f32", "bf16", "f16")),
              "--attr-zero-points": (("s32",), ("s32", "s8", "u8"))}


def parse_scales(text: str, dims: dict, oc_dim: dict, option: str = "--attr-scales") -> dict:
    """benchdnn's ``--attr-scales`` (``src:common:0.5+wei:per_oc+dst:host_scalar:2``):
    ``{arg: QuantEntry(mask, scale)}`` for ``ARG_SRC`` / ``ARG_WEIGHTS`` / ``ARG_DST``.
    Policies: ``common`` (mask 0), ``host_scalar`` (mask 0, the value a host scalar),
    ``per_oc`` (the argument's output-channel dim ``oc_dim[arg]``), ``per_dim_<digits>``
    (those dims), ``per_tensor`` (every dim); ``dims[arg]`` are the argument's dims. The
    primitive decides which masks it takes."""
    out = {}
    for entry in filter(None, text.split("+")):
        parts = entry.strip().split(":")
        if len(parts) < 2 or parts[0] not in _SCALE_ARGS:
            raise invalid_arguments(f"{option}: entry {entry!r}: expected "
                                    f"src|wei|dst:POLICY[:SCALE], e.g. wei:per_oc")
        arg, policy = _SCALE_ARGS[parts[0]], parts[1]
        nd = len(dims[arg])
        host = policy == "host_scalar"  # oneDNN's value passed on the host, not in a memory
        if policy in ("common", "host_scalar"):
            mask = 0
        elif policy == "per_oc":
            mask = 1 << oc_dim[arg]
        elif policy == "per_tensor":
            mask = (1 << nd) - 1
        elif policy.startswith("per_dim_") and policy[8:].isdigit() and \
                all(int(c) < nd for c in policy[8:]):
            mask = sum(1 << int(c) for c in set(policy[8:]))
        else:
            raise invalid_arguments(f"{option}: {entry}: policy must be common, host_scalar, "
                                    f"per_oc, per_tensor or per_dim_<dims> (of {nd}), got "
                                    f"{policy}")
        try:
            scale = float(parts[2]) if len(parts) > 2 and parts[2] else 1.0
        except ValueError:
            raise invalid_arguments(f"{option}: {entry}: value {parts[2]!r} is not a "
                                    f"number") from None
        dt = parts[3] if len(parts) > 3 else ""
        device_dts, host_dts = _QUANT_DTS.get(option, _QUANT_DTS["--attr-scales"])
        if dt and dt not in (host_dts if host else device_dts):
            raise unimplemented(f"{option}: {entry}: data type {dt}; expected "
                                f"{' or '.join(host_dts if host else device_dts)}"
                                + ("" if host else " (other types only as host_scalar)"))
        if len(parts) > 4:
            raise unimplemented(f"{option}: {entry}: groups are not implemented")
        out[arg] = QuantEntry(mask, scale, host, dt)
    return out


def set_scales(attr, scales: dict) -> None:
    """The scales of :func:`parse_scales` on ``attr`` (host scalars through
    ``set_host_scale``)."""
    for arg, e in scales.items():
        if getattr(e, "host", False):
            attr.set_host_scale(arg, e.dt or "f32")
        else:
            attr.set_scales_mask(arg, e[0])


def set_zero_points(attr, zero_points: dict) -> None:
    """The zero points of :func:`parse_zero_points` on ``attr`` (host scalars through
    ``set_host_zero_point``)."""
    for arg, e in zero_points.items():
        if getattr(e, "host", False):
            attr.set_host_zero_point(arg, e.dt or "s32")
        else:
            attr.set_zero_points_mask(arg, e[0])


def scale_values(b, scales: dict) -> dict:
    """Write each scale's values (the given scale, times :data:`_SCALE_STEPS` per index)
    into ``b.values`` and ``b.args``; returns ``{arg: values}``."""
    out = {}
    for arg, (_, scale) in scales.items():
        key = dnnl.ARG_ATTR_SCALES | arg
        n = int(np.prod(b.pd.query_md(dnnl.query.exec_arg_md, key).dims))
        v = np.array([scale * _SCALE_STEPS[i % 4] for i in range(n)], np.float32)
        b.args[key].write(v)
        v = b.args[key].to_numpy().astype(np.float32)  # as stored (a bf16/f16 host scalar)
        b.values[key] = v
        out[arg] = v
    return out


def apply_scales(prod, bias, post_ops, prior, ops, scales: dict):
    """oneDNN's formula in float64: ``post_ops(src * wei * prod + bias) / dst``; ``scales``
    maps arguments to their values shaped to broadcast against ``prod`` (dst's shape)."""
    from ..reference.post_ops import apply_post_ops

    v = prod
    for arg in (dnnl.ARG_SRC, dnnl.ARG_WEIGHTS):
        if arg in scales:
            v = v * scales[arg].astype(np.float64)
    v = apply_post_ops(v + bias, post_ops, prior, ops)
    if dnnl.ARG_DST in scales:
        v = v * (1.0 / scales[dnnl.ARG_DST].astype(np.float64))
    return v


_DT = {t.name: t for t in dnnl.memory.data_type}


def parse_dt(text: str, n: int = 3) -> list:
    """``--dt``: ``src:wei:dst`` data type names (one name: every tensor)."""
    names = text.split(":") if text else ["f32"]
    if len(names) == 1:
        names = names * n
    if len(names) != n or any(x not in _DT for x in names):
        raise invalid_arguments(f"--dt={text}: expected {n} data types joined by ':' "
                                f"(src:wei:dst), e.g. u8:s8:f32")
    return [_DT[x] for x in names]


def parse_zero_points(text: str, dims: dict, oc_dim: dict) -> dict:
    """benchdnn's ``--attr-zero-points`` (``src:common:2+dst:per_oc:1``): ``{arg: (mask,
    value)}``; policies as :func:`parse_scales`' (the primitive decides which it takes)."""
    out = {}
    for arg, e in parse_scales(text, dims, oc_dim, "--attr-zero-points").items():
        mask, value = e
        if value != int(value):
            raise invalid_arguments(f"--attr-zero-points: {value} is not an integer")
        out[arg] = QuantEntry(mask, int(value), e.host, e.dt)
    return out


def int8_args(pd, eng, seed: int) -> tuple[dict, dict]:
    """``(values, memories)`` of an int8 problem: small integers in every integer tensor
    (u8 0..8, s8 -4..4, s32 -50..50), standard-normal values in the others."""
    rng = np.random.default_rng(seed)
    ranges = {dnnl.memory.data_type.u8: (0, 9), dnnl.memory.data_type.s8: (-4, 5),
              dnnl.memory.data_type.s32: (-50, 51)}
    values, args = {}, {}
    for arg, spec in pd.arg_specs().items():
        t = spec.md.data_type
        if t in ranges:
            v = rng.integers(*ranges[t], spec.md.dims).astype(t.storage_dtype)
        else:
            v = rng.standard_normal(spec.md.dims).astype(np.float32)
        values[arg], args[arg] = v, argument_memory(spec.md, eng, v)
    return values, args


def zero_point_values(b, zero_points: dict) -> None:
    """The zero points' values (the given one at every index) into ``b.values``, ``b.args``
    and ``b.zp_vals``."""
    b.zp_vals = {}
    for arg, (_, value) in zero_points.items():
        key = dnnl.ARG_ATTR_ZERO_POINTS | arg
        v = np.full(b.args[key].get_desc().dims, value, np.int32)
        b.values[key] = v
        b.args[key].write(v)
        b.zp_vals[arg] = v


def int8_error(got, y, dst_dt) -> tuple[float, float]:
    """(relative error, tolerance) of an int8 primitive's dst against float64 ``y`` (before
    conversion): integer dst one unit (a tie's other side), float dst its own half ulp and f32's
    arithmetic."""
    from ..reference.matmul import quantize

    want = quantize(y, dst_dt.name)
    top = max(float(np.abs(want).max()), 1.0)
    err = float(np.abs(np.asarray(got, np.float64) - want).max()) / top
    ulp = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11}.get(dst_dt.name, 2.0 ** -20)
    return err, (1.0 / top if dst_dt.name in ("s8", "u8", "s32") else 2 * ulp)


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
        MD = dnnl.memory.desc
        self.dts = parse_dt(opts.get("dt", ""))
        self.int8 = self.dts[0].name in ("u8", "s8")
        descs = [MD(sd, self.dts[0], _tag(opts, "stag", nd)),
                 MD(wd, self.dts[1], _tag(opts, "wtag", nd))]
        bia = opts.get("bia_dt", opts.get("bia-dt", "undef")).lower()
        self.with_bias = bia != "undef"
        if self.with_bias:
            mask = int(opts.get("bia_mask", opts.get("bia-mask", 1 << (nd - 1))))
            descs.append(MD([d if mask >> i & 1 else 1 for i, d in enumerate(dd)],
                            parse_dt(bia, 1)[0], "abcdefghijkl"[:nd]))
        descs.append(MD(dd, self.dts[2], _tag(opts, "dtag", nd)))
        self.post_ops = parse_post_ops(opts.get("attr-post-ops", ""), dd, oc_dim=nd - 1)
        attr = dnnl.primitive_attr()
        attr.set_post_ops(self.post_ops)
        self.scale_dims = {dnnl.ARG_SRC: sd, dnnl.ARG_WEIGHTS: wd, dnnl.ARG_DST: dd}
        self.scales = parse_scales(opts.get("attr-scales", ""), self.scale_dims,
                                   {dnnl.ARG_SRC: nd - 1, dnnl.ARG_WEIGHTS: nd - 1,
                                    dnnl.ARG_DST: nd - 1})
        set_scales(attr, self.scales)
        self.zero_points = parse_zero_points(opts.get("attr-zero-points", ""), self.scale_dims,
                                             {a: nd - 1 for a in self.scale_dims})
        set_zero_points(attr, self.zero_points)
        self.tf32 = fpmath_attr(opts, attr)
        t0 = time.perf_counter()
        self.pd = dnnl.matmul.primitive_desc(eng, *descs, attr)
        self.prim = dnnl.matmul(self.pd)
        self.create_ms = (time.perf_counter() - t0) * 1e3
        self.dims = (sd, wd, dd)
        self.values, self.args = (int8_args if self.int8 else random_args)(self.pd, eng, seed)
        self.scale_vals = scale_values(self, self.scales)
        zero_point_values(self, self.zero_points)
        self.stream = dnnl.stream(eng)

    def run(self) -> None:
        self.prim.execute(self.stream, self.args)

    def flops(self) -> float:
        sd, wd, dd = self.dims
        return 2.0 * np.prod(dd) * sd[-1]

    def check(self) -> float:
        from .common import operand_entries, post_op_arg

        prior = self.values[dnnl.ARG_DST]
        self.run()
        self.stream.wait()
        v = self.values
        ref = np.matmul(v[dnnl.ARG_SRC].astype(np.float64), v[dnnl.ARG_WEIGHTS])
        ops = {i: v[post_op_arg(self.post_ops, i)] for i in operand_entries(self.post_ops)}
        # each scale over its argument's dims where its mask has them: with the masks
        # matmul takes (no K) they line up with dst's trailing dims
        shaped = {a: self.scale_vals[a].reshape([d if m >> i & 1 else 1 for i, d in
                                                 enumerate(self.scale_dims[a])])
                  for a, (m, _) in self.scales.items()}
        if self.int8:
            return self._check_int8(v, prior, ops, shaped)
        ref = apply_scales(ref, v[dnnl.ARG_BIAS] if self.with_bias else 0.0, self.post_ops,
                           prior, ops, shaped)
        got = self.args[dnnl.ARG_DST].to_numpy()
        return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


    def _check_int8(self, v, prior, ops, shaped) -> tuple[float, float]:
        from ..reference.matmul import matmul_int8
        from ..reference.post_ops import apply_post_ops

        def zp(arg):
            m = self.zero_points.get(arg, (0, 0))[0]
            z = self.zp_vals.get(arg, np.zeros(1, np.int32))
            return z.reshape([d if m >> i & 1 else 1 for i, d in enumerate(self.scale_dims[arg])])
        one = np.ones(1)
        y = matmul_int8(v[dnnl.ARG_SRC], v[dnnl.ARG_WEIGHTS],
                        v[dnnl.ARG_BIAS] if self.with_bias else None,
                        shaped.get(dnnl.ARG_SRC, one), shaped.get(dnnl.ARG_WEIGHTS, one),
                        shaped.get(dnnl.ARG_DST, one), zp(dnnl.ARG_SRC), zp(dnnl.ARG_WEIGHTS),
                        zp(dnnl.ARG_DST),
                        post_ops=lambda x: apply_post_ops(x, self.post_ops, prior, ops))
        return int8_error(self.args[dnnl.ARG_DST].to_numpy(), y, self.dts[2])


def _peer(b: MatmulBench, compare: str | None, eng, min_seconds: float):
    sd, wd, dd = b.dims
    if compare == "numpy":  # in f32 (int8 data too: numpy has no fast integer product)
        x, w = (b.values[a].astype(np.float32) for a in (dnnl.ARG_SRC, dnnl.ARG_WEIGHTS))
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
        err = b.check()
        tol = fpmath_rtol(b.tf32, 1e-5) * max(1.0, np.sqrt(b.dims[0][-1] / 1024)) \
            + store_rtol(b.dts[2:])
        if b.int8:
            err, tol = err
        line, failed = check_line("matmul", desc, problem, err, tol)
        print(line, flush=True)
        return failed
    tmin, tmed = time_ms(b.run, min_seconds, b.stream.wait)
    print(perf_line("matmul", desc, problem, b.create_ms, tmin, tmed, flops=b.flops(),
                    peer=_peer(b, compare, eng, min_seconds)), flush=True)
    return 0
