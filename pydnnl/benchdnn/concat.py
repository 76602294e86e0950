"""benchdnn's concat driver: ``--concat [--sdt=f32] [--ddt=f32] [--stag=abx[:abx...]]
[--dtag=undef] [--axis=1] DIMS:DIMS[:DIMS...]``, e.g. ``--axis=1 8x16x32x32:8x8x32x32``.

As in oneDNN's benchdnn: sources joined by ``:`` equal but along ``--axis`` (default 1);
``--stag`` one tag for all or one per source; ``--dtag=undef`` (the default) creates the
primitive without a dst desc; ``--sdt`` (one type for all sources, or one each, all equal)
and ``--ddt`` (default: the sources' type; applies where ``--dtag`` gives a dst) take
``f32``, ``bf16``, ``f16``. Mode C checks bit-exactly against the numpy reference; mode P
prints times, GB/s of bytes read and written, the copy kernel's GB/s, and PyTorch's
``torch.cat`` time with ``--compare=torch``.
"""
from __future__ import annotations

import itertools
import time

from ..constants import ARG_DST, ARG_MULTIPLE_SRC
from ..error import invalid_arguments, unimplemented
from .binary import data, nbytes_of, parse_dts, rel_err, tag_of, tags_for
from .common import (
    check_line,
    check_options,
    copy_gbs,
    parse_dims_list,
    perf_line,
    time_ms,
    torch_device,
)

_KNOWN = {"sdt", "ddt", "stag", "dtag", "axis"}


def _torch_ms(xs, axis, device, min_seconds, dt=None) -> float | None:
    import torch

    from .binary import torch_dtype
    from .common import torch_time_ms

    ts = [torch.from_numpy(x).to(device, torch_dtype(dt)) for x in xs]
    out = torch.cat(ts, axis)
    return torch_time_ms(lambda: torch.cat(ts, axis, out=out), device, min_seconds)


def run_one(eng, shapes, axis, stags, dtag, mode, compare, min_seconds, sdt="f32",
            ddt="") -> int:
    import pydnnl as dnnl

    from ..reference.concat import concat as ref_concat

    nd = len(shapes[0])
    problem = ":".join("x".join(map(str, s)) for s in shapes)
    sdts = parse_dts(sdt, len(shapes), "sdt")
    (td,) = parse_dts(ddt or sdts[0].name, 1, "ddt")
    desc = ((f"--sdt={sdt} " if sdt != "f32" else "") + (f"--ddt={ddt} " if ddt else "")
            + f"--stag={':'.join(stags)} --dtag={dtag} --axis={axis}")
    MD = dnnl.memory.desc
    try:
        mds = [MD(s, t, tag_of(tg, nd)) for s, t, tg in zip(shapes, sdts, stags)]
        t0 = time.perf_counter()
        if dtag in ("undef", ""):
            pd = dnnl.concat.primitive_desc(eng, axis, mds)
        else:
            dims = list(shapes[0])
            dims[axis] = sum(s[axis] for s in shapes)
            pd = dnnl.concat.primitive_desc(eng, MD(dims, td, tag_of(dtag, nd)), axis, mds)
        prim = dnnl.concat(pd)
        create_ms = (time.perf_counter() - t0) * 1e3
    except unimplemented as e:
        print(f"skip,unimplemented,concat,{desc},{problem},{e}", flush=True)
        return 0
    s = dnnl.stream(eng)
    xs = [data(sh, 1 + i) for i, sh in enumerate(shapes)]
    args = {ARG_MULTIPLE_SRC + i: dnnl.memory(pd.src_desc(i), eng, x) for i, x in enumerate(xs)}
    out = args[ARG_DST] = dnnl.memory(pd.dst_desc(), eng)
    if mode == "C":  # integers and halves: exact in every type, so the copy must be exact
        prim.execute(s, args)
        s.wait()
        line, fails = check_line("concat", desc, problem,
                                 rel_err(out.to_numpy(), ref_concat(axis, xs)), 0.0)
        print(line + f",impl={pd.impl_info_str()}", flush=True)
        return fails
    if mode != "P":
        raise invalid_arguments(f"--mode={mode}: the concat driver runs P or C")
    tmin, tmed = time_ms(lambda: prim.execute(s, args), min_seconds, s.wait)
    peer = None
    if compare == "torch":
        dev = torch_device(eng)
        peer = ("torch", None if dev is None else _torch_ms(xs, axis, dev, min_seconds, sdts[0]))
    nbytes = nbytes_of([pd.src_desc(i) for i in range(len(xs))] + [pd.dst_desc()])
    copy = copy_gbs(eng, pd.dst_desc().get_size(), min_seconds=min(0.5, max(min_seconds, 0.05)))
    print(perf_line("concat", desc, problem, create_ms, tmin, tmed, nbytes=nbytes, peer=peer,
                    copy=copy) + f",impl={pd.impl_info_str()}", flush=True)
    return 0


def run(eng, problem: str, opts: dict[str, str], mode: str, compare: str | None,
        min_seconds: float) -> int:
    """Run ``problem`` for every combination of the options; returns the failed checks."""
    check_options("concat", opts, _KNOWN, compare)
    shapes = parse_dims_list(problem)
    fails = 0
    for sdt, ddt, axis, stag, dtag in itertools.product(opts.get("sdt", "f32").split(","),
                                                        opts.get("ddt", "").split(","),
                                                        opts.get("axis", "1").split(","),
                                              opts.get("stag", "abx").split(","),
                                              opts.get("dtag", "undef").split(",")):
        try:
            ax = int(axis)
        except ValueError:
            raise invalid_arguments(f"--axis={axis}: expected an integer") from None
        fails += run_one(eng, shapes, ax, tags_for(stag, len(shapes)), dtag, mode, compare,
                         min_seconds, sdt, ddt)
    return fails
