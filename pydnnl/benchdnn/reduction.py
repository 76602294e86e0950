"""benchdnn's reduction driver: ``--reduction [--alg=sum] [--p=1] [--eps=0] [--sdt=f32]
[--ddt=f32] [--stag=abx] [--dtag=any] SRC_DIMS:DST_DIMS`` (e.g. ``8x16x32x32:8x16x1x1``).

As in oneDNN's benchdnn: ``--alg`` is ``max``, ``min``, ``sum``, ``mul``, ``mean``,
``norm_lp_max``, ``norm_lp_sum``, ``norm_lp_power_p_max`` or ``norm_lp_power_p_sum`` (with or
without the ``reduction_`` prefix, any case), ``--p`` and ``--eps`` the norms' parameters;
every option may list values separated by commas. Mode C checks against the numpy reference;
mode P prints times, GB/s of bytes read and written, the copy kernel's GB/s and PyTorch's
time with ``--compare=torch``.
"""
from __future__ import annotations

import itertools
import time

import numpy as np

from ..constants import ARG_DST, ARG_SRC, algorithm
from ..error import invalid_arguments
from .common import (
    check_line,
    check_options,
    copy_gbs,
    parse_dims_list,
    perf_line,
    time_ms,
    torch_device,
)
from .softmax import TOLERANCES, check_dt, parse_tag, rel_err

_KNOWN = {"alg", "p", "eps", "sdt", "ddt", "stag", "dtag"}
TOLERANCE = 5e-5  # max |got - ref| / max(1, |ref|) in float32 (long sums round more)


def parse_alg(text: str) -> algorithm:
    name = text.strip().lower().removeprefix("reduction_")
    try:
        return algorithm["reduction_" + name]
    except KeyError:
        raise invalid_arguments(f"--alg={text}: expected max, min, sum, mul, mean, "
                                f"norm_lp_max, norm_lp_sum, norm_lp_power_p_max or "
                                f"norm_lp_power_p_sum") from None


def _torch_ms(alg, p, eps, x, dst_dims, device, min_seconds) -> float | None:
    import torch

    t = torch.from_numpy(x).to(device)
    axes = tuple(d for d in range(x.ndim) if dst_dims[d] != x.shape[d])
    name = alg.name.removeprefix("reduction_")
    fns = {"max": lambda: torch.amax(t, axes, keepdim=True),
           "min": lambda: torch.amin(t, axes, keepdim=True),
           "sum": lambda: torch.sum(t, axes, keepdim=True),
           "mean": lambda: torch.mean(t, axes, keepdim=True),
           "norm_lp_sum": lambda: torch.linalg.vector_norm(t, p, axes, keepdim=True)}
    fn = fns.get(name)
    if fn is None:
        return None
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with torch.no_grad():
        return time_ms(fn, min_seconds, sync)[0]


def _data(alg: algorithm, dims, seed: int) -> np.ndarray:
    """Values of both signs; near 1 for products (the result stays finite)."""
    rng = np.random.default_rng(seed)
    if alg == algorithm.reduction_mul:
        return rng.uniform(0.95, 1.05, dims).astype(np.float32)
    return rng.uniform(-2.0, 2.0, dims).astype(np.float32)


def run_one(eng, sdims, ddims, alg, p, eps, stag, dtag, mode, compare, min_seconds,
            sdt="f32", ddt="f32") -> int:
    import pydnnl as dnnl

    from ..reference.reduction import reduction as ref

    sd, dd = dnnl.memory.data_type[sdt], dnnl.memory.data_type[ddt]
    desc = (f"--alg={alg.name.removeprefix('reduction_')} --p={p:g} --eps={eps:g} "
            f"--sdt={sdt} --ddt={ddt} --stag={stag} --dtag={dtag}")
    problem = "x".join(map(str, sdims)) + ":" + "x".join(map(str, ddims))
    nd = len(sdims)
    t0 = time.perf_counter()
    pd = dnnl.reduction.primitive_desc(eng, alg, dnnl.memory.desc(sdims, sd,
                                                                  parse_tag(stag, nd)),
                                       dnnl.memory.desc(ddims, dd, parse_tag(dtag, nd)), p, eps)
    prim = dnnl.reduction(pd)
    create_ms = (time.perf_counter() - t0) * 1e3
    s = dnnl.stream(eng)
    x = _data(alg, sdims, 1)
    src = dnnl.memory(pd.src_desc(), eng, x)
    x = np.asarray(src.to_numpy(), np.float32)  # as stored
    dst = dnnl.memory(pd.dst_desc(), eng)
    args = {ARG_SRC: src, ARG_DST: dst}
    if mode == "C":
        prim.execute(s, args)
        s.wait()
        line, fails = check_line("reduction", desc, problem,
                                 rel_err(dst.to_numpy(), ref(alg, x, ddims, p, eps)),
                                 max(TOLERANCE, TOLERANCES[ddt]))
        print(line + f",impl={pd.impl_info_str()}", flush=True)
        return fails
    if mode != "P":
        raise invalid_arguments(f"--mode={mode}: the reduction driver runs P or C")
    tmin, tmed = time_ms(lambda: prim.execute(s, args), min_seconds, s.wait)
    peer = None
    if compare == "torch":
        dev = torch_device(eng)
        peer = ("torch", None if dev is None else _torch_ms(alg, p, eps, x, ddims, dev,
                                                            min_seconds))
    nbytes = x.size * sd.itemsize + int(np.prod(ddims)) * dd.itemsize
    copy = copy_gbs(eng, x.size * sd.itemsize, min_seconds=min(0.5, max(min_seconds, 0.05)))
    print(perf_line("reduction", desc, problem, create_ms, tmin, tmed, nbytes=nbytes, peer=peer,
                    copy=copy) + f",impl={pd.impl_info_str()}", flush=True)
    return 0


def run(eng, problem: str, opts: dict[str, str], mode: str, compare: str | None,
        min_seconds: float) -> int:
    """Run ``problem`` (``SRC_DIMS:DST_DIMS``) for every combination of the options; returns
    the number of failed checks."""
    check_options("reduction", opts, _KNOWN, compare)
    check_dt(opts, ("sdt", "ddt"))
    dl = parse_dims_list(problem)
    if len(dl) != 2:
        raise invalid_arguments(f"problem {problem!r}: expected SRC_DIMS:DST_DIMS, e.g. "
                                f"8x16x32x32:8x16x1x1")
    sdims, ddims = dl
    algs = [parse_alg(v) for v in opts.get("alg", "sum").split(",")]
    try:
        ps = [float(v) for v in opts.get("p", "1").split(",")]
        epss = [float(v) for v in opts.get("eps", "0").split(",")]
    except ValueError:
        raise invalid_arguments(f"--p={opts.get('p')} / --eps={opts.get('eps')}: expected "
                                f"numbers") from None
    stags = opts.get("stag", "abx").split(",")
    dtags = opts.get("dtag", "any").split(",")
    sdts = [v.strip() for v in opts.get("sdt", "f32").split(",")]
    ddts = [v.strip() for v in opts.get("ddt", "f32").split(",")]
    fails = 0
    for alg, p, eps, st, dt_, sdt, ddt in itertools.product(algs, ps, epss, stags, dtags, sdts,
                                                             ddts):
        fails += run_one(eng, sdims, ddims, alg, p, eps, st, dt_, mode, compare, min_seconds,
                         sdt, ddt)
    return fails
