"""benchdnn's binary driver: ``--binary [--alg=ADD] [--sdt=f32:f32] [--ddt=f32]
[--stag=abx:abx] [--dtag=any] [--inplace=true] [--attr-scales=src0:common:0.5+...]
[--attr-post-ops=...] SRC0DIMS:SRC1DIMS``, e.g. ``--alg=ADD 8x16x32x32:8x16x1x1``.

As in oneDNN's benchdnn: ``--alg`` is ``ADD``, ``MUL``, ``MAX``, ``MIN``, ``DIV``, ``SUB``,
``GE``, ``GT``, ``LE``, ``LT``, ``EQ``, ``NE`` or ``SELECT`` (any case, ``binary_`` prefix
allowed; ``SELECT`` adds the s8 condition src2 with src0's dims and src0's tag, as benchdnn
does: no option of its own); src1 may
have fewer dims than src0 (trailing dims padded with 1, so ``8x8x3x5:8`` broadcasts over the
three innermost dims); ``--stag`` takes one tag for both sources or two joined by ``:``, each a
oneDNN format tag or benchdnn's ``abx`` (plain), ``axb`` (channels last), ``aBx8b`` /
``aBx16b`` (blocked channels), ``any``; ``--inplace`` (default true, as benchdnn's) writes into
src0's memory where src0 has dst's desc; ``--sdt`` takes one data type for both sources or two
joined by ``:``, ``--ddt`` one (``f32``, ``bf16``, ``f16``); every option may list values
separated by commas, each combination runs. Mode C checks against the numpy reference on
integers and halves (ties for the comparisons; exact in every type); mode P prints times,
GB/s of bytes read and written, the copy kernel's GB/s, and PyTorch's time with ``--compare=torch``.

The layout helpers here serve the sum and concat drivers too.
"""
from __future__ import annotations

import itertools
import time

import numpy as np

from ..constants import (
    ARG_ATTR_MULTIPLE_POST_OP,
    ARG_ATTR_SCALES,
    ARG_DST,
    ARG_SRC_0,
    ARG_SRC_1,
    ARG_SRC_2,
)
from ..error import invalid_arguments, unimplemented
from .common import (
    check_line,
    check_options,
    copy_gbs,
    parse_dims_list,
    parse_post_ops,
    perf_line,
    post_op_operand,
    post_op_operands,
    time_ms,
    torch_device,
    torch_time_ms,
)

_KNOWN = {"alg", "sdt", "ddt", "stag", "dtag", "inplace", "attr-scales", "attr-post-ops"}
_ALGS = ("add", "mul", "max", "min", "div", "sub", "ge", "gt", "le", "lt", "eq", "ne", "select")
TOLERANCE = 1e-6  # max |got - ref| / max(1, |ref|) in float32 (one rounding)


# -- shared by the binary, sum and concat drivers ----------------------------------------------
def tag_of(text: str, nd: int) -> str:
    """benchdnn tag -> a format tag name for ``nd`` dims."""
    t = text.strip()
    if t in ("any", "undef", ""):
        return "any"
    if t == "abx":
        return "abcdefghijkl"[:nd]
    if t == "axb":
        return "a" + "cdefghijkl"[:max(0, nd - 2)] + "b" if nd >= 3 else "abcdefghijkl"[:nd]
    if t in ("aBx8b", "aBx16b"):
        if nd < 3:
            raise unimplemented(f"--stag/--dtag={t}: blocked channels need 3 or more dims")
        return "aB" + "cdefghijkl"[:nd - 2] + t[3:]
    return t


def tags_for(text: str, n: int) -> list[str]:
    """One tag text per source: a single tag for all, or ``n`` joined by ``:``."""
    parts = text.split(":")
    if len(parts) == 1:
        return parts * n
    if len(parts) != n:
        raise invalid_arguments(f"--stag={text}: give one tag or {n} tags joined by ':'")
    return parts


DTS = ("f32", "bf16", "f16")


def parse_dts(text: str, n: int, key: str) -> list:
    """``--sdt``/``--ddt``/``--dt`` text -> ``n`` data types (one for all or ``n`` joined by
    ``:``; empty means f32)."""
    from ..memory.data_types import data_type

    parts = [v.strip() or "f32" for v in (text or "f32").split(":")]
    for v in parts:
        if v not in DTS:
            raise unimplemented(f"--{key}={text}: {v}; f32, bf16 and f16 are implemented")
    if len(parts) == 1:
        parts = parts * n
    if len(parts) != n:
        raise invalid_arguments(f"--{key}={text}: give one data type or {n} joined by ':'")
    return [data_type[v] for v in parts]


def eps(dt) -> float:
    """Unit roundoff of ``dt`` (the relative error of one rounding)."""
    from ..memory.data_types import data_type

    return {data_type.bf16: 2.0 ** -8, data_type.f16: 2.0 ** -11}.get(dt, 2.0 ** -24)


def torch_dtype(dt):
    import torch

    from ..memory.data_types import data_type

    return {data_type.bf16: torch.bfloat16, data_type.f16: torch.float16}.get(dt, torch.float32)


def check_dt(opts: dict, key: str, default: str = "f32") -> None:
    for v in opts.get(key, default).split(":"):
        if v.strip() not in DTS + ("",):
            raise unimplemented(f"--{key}={opts[key]}: f32, bf16 and f16 are implemented")


def flag(text: str, key: str) -> bool:
    v = text.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no", ""):
        return False
    raise invalid_arguments(f"--{key}={text}: expected true or false")


def rel_err(got, want) -> float:
    got = np.asarray(got, np.float64)
    err = np.abs(got - want) / np.maximum(1.0, np.abs(want))
    return float(err.max()) if err.size else 0.0


def data(shape, seed: int, nonzero: bool = False) -> np.ndarray:
    """benchdnn-like values: integers and halves of both signs (exact in float32)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-8, 9, shape).astype(np.float64) * 0.5
    if nonzero:
        x = np.where(x == 0, 1.0, x)
    return x.astype(np.float32)


def nbytes_of(mds) -> int:
    return sum(md.get_size() for md in mds)


# -- the binary driver -------------------------------------------------------------------------
def parse_alg(text: str):
    from ..constants import algorithm

    name = text.strip().lower().removeprefix("binary_")
    if name not in _ALGS:
        raise invalid_arguments(f"--alg={text}: expected one of "
                                f"{', '.join(a.upper() for a in _ALGS)}")
    return algorithm["binary_" + name]


def parse_scales(text: str) -> dict[int, float]:
    """``src0:common:0.5+src1:common:2`` -> ``{ARG_SRC_0: 0.5, ARG_SRC_1: 2.0}``."""
    out = {}
    if not text:
        return out
    for entry in text.split("+"):
        parts = entry.strip().split(":")
        if parts[0] not in ("src0", "src", "src1", "msrc0", "msrc1") or len(parts) < 2:
            raise invalid_arguments(f"--attr-scales: entry {entry!r}: expected "
                                    f"src0|src1:common:SCALE")
        if parts[1] != "common":
            raise unimplemented(f"--attr-scales: {entry}: only the common policy (one scale)")
        arg = ARG_SRC_1 if parts[0].endswith("1") else ARG_SRC_0
        out[arg] = float(parts[2]) if len(parts) > 2 else 1.0
    return out


def _torch_ms(alg, x0, x1, device, min_seconds, dts=None, cond=None) -> float | None:
    import torch

    name = alg.name[7:]
    if name == "select":  # torch.where over a bool condition (torch has no s8 one)
        t0, t1, td = (torch_dtype(d) for d in (dts or (None,) * 3))
        a = torch.from_numpy(x0).to(device, t0)
        b = torch.from_numpy(x1).to(device, t1)
        c = torch.from_numpy(cond != 0).to(device)
        out = torch.empty(np.broadcast_shapes(x0.shape, x1.shape), device=device,
                          dtype=torch.promote_types(t0, t1))
        return torch_time_ms(lambda: torch.where(c, a, b, out=out), device, min_seconds)
    fns = {"add": torch.add, "mul": torch.mul, "max": torch.maximum, "min": torch.minimum,
           "div": torch.div, "sub": torch.sub, "ge": torch.ge, "gt": torch.gt, "le": torch.le,
           "lt": torch.lt, "eq": torch.eq, "ne": torch.ne}
    t0, t1, td = (torch_dtype(d) for d in (dts or (None,) * 3))
    a = torch.from_numpy(x0).to(device, t0)
    b = torch.from_numpy(x1).to(device, t1)
    out = torch.empty(np.broadcast_shapes(x0.shape, x1.shape), device=device,
                      dtype=torch.bool if name in ("ge", "gt", "le", "lt", "eq", "ne")
                      else td)
    fn = fns[name]
    return torch_time_ms(lambda: fn(a, b, out=out), device, min_seconds)


def run_one(eng, d0, d1, alg, stags, dtag, inplace, scales, post_ops, mode, compare,
            min_seconds, sdt="f32", ddt="f32") -> int:
    import pydnnl as dnnl

    from ..reference.binary import binary as ref_binary
    from ..reference.post_ops import apply_post_ops

    nd = len(d0)
    dd = [max(a, b) for a, b in zip(d0, d1)]
    problem = "x".join(map(str, d0)) + ":" + "x".join(map(str, d1))
    t0, t1 = parse_dts(sdt, 2, "sdt")
    (td,) = parse_dts(ddt, 1, "ddt")
    desc = ((f"--sdt={sdt} " if sdt != "f32" else "") + (f"--ddt={ddt} " if ddt != "f32" else "")
            + f"--alg={alg.name[7:].upper()} --stag={':'.join(stags)} --dtag={dtag} "
            f"--inplace={'true' if inplace else 'false'}"
            + (f" --attr-scales={scales}" if scales else "")
            + (f" --attr-post-ops={post_ops}" if post_ops else ""))
    MD, F32, S8 = dnnl.memory.desc, dnnl.memory.data_type.f32, dnnl.memory.data_type.s8
    select = alg.name == "binary_select"
    attr = dnnl.primitive_attr()
    svals = parse_scales(scales)
    for arg in svals:
        attr.set_scales_mask(arg, 0)
    po = parse_post_ops(post_ops, dd)
    attr.set_post_ops(po)
    try:
        m0 = MD(d0, t0, tag_of(stags[0], nd))
        m1 = MD(d1, t1, tag_of(stags[1], nd))
        start = time.perf_counter()
        md = MD(dd, td, tag_of(dtag, nd))
        pd = (dnnl.binary.primitive_desc(eng, alg, m0, m1, MD(d0, S8, tag_of(stags[0], nd)),
                                         md, attr) if select
              else dnnl.binary.primitive_desc(eng, alg, m0, m1, md, attr))
        prim = dnnl.binary(pd)
        create_ms = (time.perf_counter() - start) * 1e3
    except unimplemented as e:
        print(f"skip,unimplemented,binary,{desc},{problem},{e}", flush=True)
        return 0
    s = dnnl.stream(eng)
    x0 = data(d0, 1)
    x1 = data(d1, 2, nonzero=alg.name == "binary_div")
    a = dnnl.memory(pd.src_desc(0), eng, x0)
    b = dnnl.memory(pd.src_desc(1), eng, x1)
    ip = inplace and pd.src_desc(0) == pd.dst_desc()
    prior = data(dd, 3)
    c = a if ip else dnnl.memory(pd.dst_desc(), eng, prior)
    args = {ARG_SRC_0: a, ARG_SRC_1: b, ARG_DST: c}
    cond = None
    if select:  # about half the conditions non-zero, of both signs
        cond = np.random.default_rng(4).integers(-2, 3, d0).astype(np.int8)
        cond = np.where(cond == 1, 0, cond).astype(np.int8)
        args[ARG_SRC_2] = dnnl.memory(pd.src_desc(2), eng, cond)
    for arg, v in svals.items():
        args[ARG_ATTR_SCALES | arg] = dnnl.memory(MD([1], F32, "a"), eng, np.float32([v]))
    po_srcs = {}
    for i, pdims in post_op_operands(po).items():
        args[ARG_ATTR_MULTIPLE_POST_OP(i) | ARG_SRC_1], po_srcs[i] = post_op_operand(
            po.get_params_binary(i)[1], eng, data(pdims, 10 + i, nonzero=True))
    if mode == "C":
        prim.execute(s, args)
        s.wait()
        want = ref_binary(alg, x0, x1, svals.get(ARG_SRC_0, 1.0), svals.get(ARG_SRC_1, 1.0),
                          src2=cond)
        want = apply_post_ops(want, po, prior=x0 if ip else prior, binary_srcs=po_srcs)
        # integers and halves are exact in every type; one rounding to dst's type per result
        tol = max(TOLERANCE, 2 * eps(td)) * (1 + 4 * po.len())
        line, fails = check_line("binary", desc, problem, rel_err(c.to_numpy(), want), tol)
        print(line + f",impl={pd.impl_info_str()}", flush=True)
        return fails
    if mode != "P":
        raise invalid_arguments(f"--mode={mode}: the binary driver runs P or C")
    tmin, tmed = time_ms(lambda: prim.execute(s, args), min_seconds, s.wait)
    peer = None
    if compare == "torch":
        dev = torch_device(eng)
        peer = ("torch", None if dev is None else _torch_ms(alg, x0, x1, dev, min_seconds,
                                                                (t0, t1, td), cond))
    nbytes = nbytes_of([pd.src_desc(0), pd.src_desc(1), pd.dst_desc()]
                       + ([pd.src_desc(2)] if select else []))
    copy = copy_gbs(eng, pd.dst_desc().get_size(), min_seconds=min(0.5, max(min_seconds, 0.05)))
    print(perf_line("binary", desc, problem, create_ms, tmin, tmed, nbytes=nbytes, peer=peer,
                    copy=copy) + f",impl={pd.impl_info_str()}", flush=True)
    return 0


def run(eng, problem: str, opts: dict[str, str], mode: str, compare: str | None,
        min_seconds: float) -> int:
    """Run ``problem`` (``SRC0DIMS:SRC1DIMS``) for every combination of the options; returns
    the number of failed checks."""
    check_options("binary", opts, _KNOWN, compare)
    dims = parse_dims_list(problem)
    if len(dims) != 2:
        raise invalid_arguments(f"binary problem {problem!r}: expected SRC0DIMS:SRC1DIMS")
    d0, d1 = dims
    if len(d1) > len(d0):
        raise invalid_arguments(f"binary problem {problem!r}: src1 has more dims than src0")
    d1 = d1 + [1] * (len(d0) - len(d1))
    sdts = opts.get("sdt", "f32").split(",")
    ddts = opts.get("ddt", "f32").split(",")
    algs = [parse_alg(a) for a in opts.get("alg", "ADD").split(",")]
    stags = [tags_for(t, 2) for t in opts.get("stag", "abx").split(",")]
    dtags = opts.get("dtag", "any").split(",")
    inplace = [flag(v, "inplace") for v in opts.get("inplace", "true").split(",")]
    scales = opts.get("attr-scales", "").split(",")
    post = opts.get("attr-post-ops", "").split(",")
    fails = 0
    for sdt, ddt, alg, st, dt_, ip, sc, p in itertools.product(sdts, ddts, algs, stags, dtags,
                                                               inplace, scales, post):
        fails += run_one(eng, d0, d1, alg, st, dt_, ip, sc, p, mode, compare, min_seconds,
                         sdt, ddt)
    return fails
