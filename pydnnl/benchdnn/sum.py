"""benchdnn's sum driver: ``--sum [--sdt=f32:f32] [--ddt=f32] [--stag=abx[:abx...]]
[--dtag=undef] [--scales=1[:1...]] DIMS`` or ``DIMS:DIMS[:DIMS...]``, e.g.
``--scales=0.5:2 8x16x32x32:8x16x32x32``.

As in oneDNN's benchdnn the number of inputs is the number of ``--sdt`` (or ``--stag``)
entries joined by ``:``; a single ``--scales`` value is used for every input, several must
match the inputs. This driver also takes the sources' dims joined by ``:`` (all equal), which
sets the number of inputs the same way. ``--sdt`` (one type per input, or one for all) and
``--ddt`` take ``f32``, ``bf16``, ``f16``; ``--ddt`` applies where ``--dtag`` gives a dst.
``--dtag=undef`` (the default) creates the primitive
without a dst desc, so it chooses the dst layout. Mode C checks against the numpy reference on
integers and halves; mode P prints times, GB/s of bytes read and written, the copy kernel's
GB/s, and PyTorch's time (a chain of ``add`` with ``alpha``) with ``--compare=torch``.
"""
from __future__ import annotations

import itertools
import time

from ..constants import ARG_DST, ARG_MULTIPLE_SRC
from ..error import invalid_arguments, unimplemented
from .binary import check_dt, data, eps, nbytes_of, parse_dts, rel_err, tag_of, tags_for
from .common import (
    check_line,
    check_options,
    copy_gbs,
    parse_dims_list,
    perf_line,
    time_ms,
    torch_device,
)

_KNOWN = {"sdt", "ddt", "stag", "dtag", "scales"}
TOLERANCE = 1e-6


def _torch_ms(xs, scales, device, min_seconds, dt=None) -> float | None:
    import torch

    from .binary import torch_dtype
    from .common import torch_time_ms

    ts = [torch.from_numpy(x).to(device, torch_dtype(dt)) for x in xs]
    out = torch.empty_like(ts[0])

    def fn():
        torch.mul(ts[0], scales[0], out=out)
        for t, s in zip(ts[1:], scales[1:]):
            out.add_(t, alpha=s)

    return torch_time_ms(fn, device, min_seconds)


def run_one(eng, dims, n, stags, dtag, scales, mode, compare, min_seconds, sdt="",
            ddt="f32") -> int:
    import pydnnl as dnnl

    from ..reference.sum import sum_ as ref_sum

    nd = len(dims)
    problem = ":".join(["x".join(map(str, dims))] * n)
    sdts = parse_dts(sdt, n, "sdt")
    (td,) = parse_dts(ddt, 1, "ddt")
    desc = ((f"--sdt={sdt} " if sdt and set(sdt.split(":")) != {"f32"} else "")
            + (f"--ddt={ddt} " if ddt != "f32" else "")
            + f"--stag={':'.join(stags)} --dtag={dtag} --scales="
            + ":".join(f"{s:g}" for s in scales))
    MD = dnnl.memory.desc
    try:
        mds = [MD(dims, t, tag_of(tg, nd)) for t, tg in zip(sdts, stags)]
        t0 = time.perf_counter()
        if dtag in ("undef", ""):
            pd = dnnl.sum.primitive_desc(eng, scales, mds)
        else:
            pd = dnnl.sum.primitive_desc(eng, MD(dims, td, tag_of(dtag, nd)), scales, mds)
        prim = dnnl.sum(pd)
        create_ms = (time.perf_counter() - t0) * 1e3
    except unimplemented as e:
        print(f"skip,unimplemented,sum,{desc},{problem},{e}", flush=True)
        return 0
    s = dnnl.stream(eng)
    xs = [data(dims, 1 + i) for i in range(n)]
    args = {ARG_MULTIPLE_SRC + i: dnnl.memory(pd.src_desc(i), eng, x) for i, x in enumerate(xs)}
    out = args[ARG_DST] = dnnl.memory(pd.dst_desc(), eng)
    if mode == "C":
        prim.execute(s, args)
        s.wait()
        line, fails = check_line("sum", desc, problem,
                                 rel_err(out.to_numpy(), ref_sum(scales, xs)),
                                 max(TOLERANCE * n, 2 * eps(pd.dst_desc().data_type)))
        print(line + f",impl={pd.impl_info_str()}", flush=True)
        return fails
    if mode != "P":
        raise invalid_arguments(f"--mode={mode}: the sum driver runs P or C")
    tmin, tmed = time_ms(lambda: prim.execute(s, args), min_seconds, s.wait)
    peer = None
    if compare == "torch":
        dev = torch_device(eng)
        peer = ("torch", None if dev is None else _torch_ms(xs, scales, dev, min_seconds,
                                                                 sdts[0]))
    nbytes = nbytes_of([pd.src_desc(i) for i in range(n)] + [pd.dst_desc()])
    copy = copy_gbs(eng, pd.dst_desc().get_size(), min_seconds=min(0.5, max(min_seconds, 0.05)))
    print(perf_line("sum", desc, problem, create_ms, tmin, tmed, nbytes=nbytes, peer=peer,
                    copy=copy) + f",impl={pd.impl_info_str()}", flush=True)
    return 0


def run(eng, problem: str, opts: dict[str, str], mode: str, compare: str | None,
        min_seconds: float) -> int:
    """Run ``problem`` for every combination of the options; returns the failed checks."""
    check_options("sum", opts, _KNOWN, compare)
    shapes = parse_dims_list(problem)
    if any(s != shapes[0] for s in shapes):
        raise invalid_arguments(f"sum problem {problem!r}: every source has the same dims")
    fails = 0
    for sdt, ddt, stag, dtag, sc in itertools.product(
            opts.get("sdt", "").split(","), opts.get("ddt", "f32").split(","),
            opts.get("stag", "abx").split(","),
            opts.get("dtag", "undef").split(","), opts.get("scales", "").split(",")):
        counts = {len(shapes)} if len(shapes) > 1 else set()
        for text in (sdt, stag, sc):
            if text and ":" in text:
                counts.add(len(text.split(":")))
        if len(counts) > 1:
            raise invalid_arguments(f"--sum: inputs disagree in number: problem {problem}, "
                                    f"--sdt={sdt}, --stag={stag}, --scales={sc}")
        n = counts.pop() if counts else 2
        if sdt:
            check_dt({"sdt": sdt}, "sdt")
        scales = [float(v) for v in sc.split(":")] if sc else [1.0]
        if len(scales) == 1:
            scales = scales * n
        fails += run_one(eng, shapes[0], n, tags_for(stag, n), dtag, scales, mode, compare,
                         min_seconds, sdt, ddt)
    return fails
