"""benchdnn's eltwise driver: ``--eltwise [--dir=FWD_D|FWD_I|BWD_D] [--alg=RELU] [--alpha=0]
[--beta=0] [--dt=f32] [--tag=abx] [--inplace=false] [--attr-post-ops=...] [--mb=0]
NxCxDxHxW``.

As in oneDNN's benchdnn, ``--alg`` takes the algorithm's name (``RELU``, ``TANH``, ``ELU``,
``SQUARE``, ``ABS``, ``SQRT``, ``LINEAR``, ``SRELU`` or ``SOFT_RELU``, ``LOGISTIC``, ``EXP``,
``GELU_TANH``, ``SWISH``, ``LOG``, ``CLIP``, ``CLIP_V2``, ``POW``, ``GELU_ERF``, ``ROUND``,
``MISH``, ``HARDSIGMOID``, ``HARDSWISH``, and ``RELU_DST``, ``TANH_DST``, ``ELU_DST``,
``SQRT_DST``, ``LOGISTIC_DST``, ``EXP_DST``, ``CLIP_V2_DST`` for the ``*_use_dst_for_bwd``
variants; any case); ``--dt`` is ``f32``, ``bf16`` or ``f16`` (every tensor); ``--tag`` a
oneDNN format tag or benchdnn's ``abx`` (plain), ``axb`` (channels last), ``aBx8b`` /
``aBx16b`` (blocked channels); ``--attr-post-ops`` benchdnn's post-op chain (the syntax of
``--conv``; forward only, and as in oneDNN only binary entries: ``add:f32:per_oc``; others
print a ``skip,unimplemented`` line); every option may list values separated by commas, each
combination runs.
Mode C checks against the numpy reference on data in benchdnn's ranges (integers and fractions
of both signs, within the algorithm's domain; binary operands integers and halves) with the
post-op chain applied in float64; mode P prints times, GB/s of bytes read and
written, the copy kernel's GB/s, and PyTorch's time with ``--compare=torch``.
"""
from __future__ import annotations

import itertools
import time

import numpy as np

from ..constants import (
    ARG_ATTR_MULTIPLE_POST_OP,
    ARG_DIFF_DST,
    ARG_DIFF_SRC,
    ARG_DST,
    ARG_SRC,
    ARG_SRC_1,
    algorithm,
    prop_kind,
)
from ..error import invalid_arguments, unimplemented
from .common import (
    TorchPostOps,
    check_line,
    check_options,
    copy_gbs,
    parse_dims,
    parse_post_ops,
    perf_line,
    post_op_operand,
    post_op_operands,
    time_ms,
    torch_device,
)

_ALIASES = {"SRELU": "soft_relu"}
_DIRS = {"FWD_D": prop_kind.forward_training, "FWD_I": prop_kind.forward_inference,
         "BWD_D": prop_kind.backward_data}
_KNOWN = {"alg", "alpha", "beta", "dir", "dt", "tag", "inplace", "mb", "attr-post-ops"}
TOLERANCE = 2e-5  # max |got - ref| / max(1, |ref|) in float32


def parse_alg(text: str) -> algorithm:
    """benchdnn's algorithm name (or the dnnl.algorithm suffix) -> ``algorithm``."""
    t = text.strip().upper()
    name = _ALIASES.get(t, t.lower())
    if name.endswith("_dst") and not name.endswith("_use_dst_for_bwd"):
        name = name[:-4] + "_use_dst_for_bwd"
    name = name.removeprefix("eltwise_")
    try:
        return algorithm["eltwise_" + name]
    except KeyError:
        raise invalid_arguments(f"--alg={text}: unknown eltwise algorithm") from None


def parse_dir(text: str) -> prop_kind:
    try:
        return _DIRS[text.strip().upper()]
    except KeyError:
        raise invalid_arguments(f"--dir={text}: expected FWD_D, FWD_I or BWD_D") from None


def _tag(text: str, nd: int):
    """benchdnn tag -> a format tag name or strides the memory.desc takes."""
    t = text.strip()
    spatial = "cdefghijkl"[: max(0, nd - 2)]
    if t in ("abx", "any"):
        return "abcdefghijkl"[:nd] if t == "abx" else "any"
    if t == "axb":
        return "a" + spatial + "b" if nd >= 3 else "ab"[:nd]
    if t in ("aBx8b", "aBx16b"):
        blk = t[3:-1]
        names = {3: f"nCw{blk}c", 4: f"nChw{blk}c", 5: f"nCdhw{blk}c"}
        if nd not in names:
            raise unimplemented(f"--tag={t}: blocked channels need 3 to 5 dims, got {nd}")
        return names[nd]
    return t


def _bool(text: str) -> bool:
    v = text.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no", ""):
        return False
    raise invalid_arguments(f"--inplace={text}: expected true or false")


def _data(alg: algorithm, shape, seed: int) -> np.ndarray:
    """benchdnn's ranges: integers up to 10 and fractions up to 1, both signs; positive
    only for log and sqrt (and pow with a fractional exponent is left to NaN both ways)."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    ints = rng.integers(-10, 11, n).astype(np.float64)
    fracs = rng.uniform(-1.0, 1.0, n)
    x = np.where(rng.random(n) < 0.5, ints, fracs)
    name = alg.name
    if "log" in name.replace("logistic", "") or "sqrt" in name:
        x = np.abs(x) + 0.25
    return x.reshape(shape).astype(np.float32)


def _rel_err(got, want) -> float:
    got = np.asarray(got, np.float64)
    same = (np.isnan(got) & np.isnan(want)) | (got == want)
    with np.errstate(invalid="ignore"):
        err = np.where(same, 0.0, np.abs(got - want) / np.maximum(1.0, np.abs(want)))
    return float(np.nan_to_num(err, nan=np.inf).max()) if err.size else 0.0


def torch_eltwise(alg, alpha: float, beta: float):
    """PyTorch's function for an eltwise algorithm's forward (``*_use_dst_for_bwd`` alike),
    None where torch has no counterpart."""
    import torch
    import torch.nn.functional as F

    base = algorithm(alg).name.removeprefix("eltwise_").replace("_use_dst_for_bwd", "")
    fns = {"relu": lambda t: F.leaky_relu(t, alpha) if alpha else F.relu(t),
           "tanh": torch.tanh, "elu": lambda t: F.elu(t, alpha), "square": torch.square,
           "abs": torch.abs, "sqrt": torch.sqrt, "linear": lambda t: t * alpha + beta,
           "soft_relu": lambda t: F.softplus(t, alpha), "logistic": torch.sigmoid,
           "exp": torch.exp, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
           "gelu_erf": F.gelu, "swish": lambda t: t * torch.sigmoid(alpha * t),
           "log": torch.log, "clip": lambda t: torch.clamp(t, alpha, beta),
           "clip_v2": lambda t: torch.clamp(t, alpha, beta),
           "pow": lambda t: alpha * torch.pow(t, beta), "round": torch.round,
           "mish": F.mish, "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid}
    return fns.get(base)


def _torch_ms(alg, alpha, beta, x, backward, device, min_seconds, dt=None,
              post=None) -> float | None:
    """PyTorch's time for the same operation (forward: with the post-op chain ``post``, a
    :func:`.common.torch_post_ops` callable), None where torch has no counterpart."""
    import torch

    fn = torch_eltwise(alg, alpha, beta)
    if fn is None or (post is not None and post.missing):
        return None
    from .binary import torch_dtype

    t = torch.from_numpy(x).to(device, torch_dtype(dt))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if not backward:
        with torch.no_grad():
            if post is not None:
                return time_ms(lambda: post(fn(t)), min_seconds, sync)[0]
            return time_ms(lambda: fn(t), min_seconds, sync)[0]
    t.requires_grad_(True)
    y = fn(t)
    g = torch.ones_like(y)
    return time_ms(lambda: torch.autograd.grad(y, t, g, retain_graph=True), min_seconds,
                   sync)[0]


def run_one(eng, dims, alg, alpha, beta, prop, tag_text, inplace, mode, compare,
            min_seconds, dt_text="f32", post_ops: str = "") -> int:
    import pydnnl as dnnl

    from .binary import data, eps, parse_dts

    (typ,) = parse_dts(dt_text, 1, "dt")
    desc = ((f"--dt={dt_text} " if dt_text != "f32" else "")
            + f"--dir={[k for k, v in _DIRS.items() if v == prop][0]} --alg={alg.name[8:]} "
            f"--alpha={alpha:g} --beta={beta:g} --tag={tag_text}"
            + (" --inplace=true" if inplace else "")
            + (f" --attr-post-ops={post_ops}" if post_ops else ""))
    problem = "x".join(map(str, dims))
    layout = _tag(tag_text, len(dims))
    backward = prop == prop_kind.backward_data
    po = parse_post_ops(post_ops, dims)
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    try:
        md = dnnl.memory.desc(dims, typ, layout)
        t0 = time.perf_counter()
        fpd = dnnl.eltwise_forward.primitive_desc(
            eng, prop_kind.forward_training if backward else prop, alg, md, md, alpha, beta,
            attr=None if backward else attr)
        if backward:  # oneDNN defines no post-ops for backward: the backward pd refuses them
            pd = dnnl.eltwise_backward.primitive_desc(eng, alg, md, md, md, alpha, beta, fpd,
                                                      attr=attr)
            prim = dnnl.eltwise_backward(pd)
        else:
            pd, prim = fpd, dnnl.eltwise_forward(fpd)
        create_ms = (time.perf_counter() - t0) * 1e3
    except (invalid_arguments, unimplemented) as e:
        # benchdnn skips alpha/beta an algorithm cannot take
        print(f"skip,{type(e).__name__},eltwise,{desc},{problem},{e}", flush=True)
        return 0
    s = dnnl.stream(eng)
    from ..reference.eltwise import eltwise_backward as ref_bwd
    from ..reference.eltwise import eltwise_forward as ref_fwd
    from ..reference.post_ops import apply_post_ops

    x = _data(alg, dims, 1)
    src = dnnl.memory(md, eng, x)
    po_srcs: dict[int, np.ndarray] = {}
    if not backward:
        dst = src if inplace else dnnl.memory(md, eng)
        args = {ARG_SRC: src, ARG_DST: dst}
        out = dst
        nbytes = 2 * x.size * typ.itemsize
        for i, pdims in post_op_operands(po).items():  # integers and halves, no zero (div)
            args[ARG_ATTR_MULTIPLE_POST_OP(i) | ARG_SRC_1], po_srcs[i] = post_op_operand(
                po.get_params_binary(i)[1], eng, data(pdims, 10 + i, nonzero=True))
            nbytes += po.get_params_binary(i)[1].get_size()
    else:
        uses_dst = alg.name.endswith("_use_dst_for_bwd")
        v = ref_fwd(alg, x, alpha, beta).astype(np.float32) if uses_dst else x
        data = dnnl.memory(md, eng, v)
        v = data.to_numpy().astype(np.float64)  # as stored
        dd = _data(algorithm.eltwise_linear, dims, 2)
        ddm = dnnl.memory(md, eng, dd)
        dd = ddm.to_numpy().astype(np.float64)
        dsm = ddm if inplace else dnnl.memory(md, eng)
        args = {ARG_DST if uses_dst else ARG_SRC: data, ARG_DIFF_DST: ddm, ARG_DIFF_SRC: dsm}
        out = dsm
        nbytes = 3 * x.size * typ.itemsize
    if mode == "C":
        xs = src.to_numpy().astype(np.float64)  # the inputs as stored in the type
        prim.execute(s, args)
        s.wait()
        if backward:
            want = ref_bwd(alg, dd, v, alpha, beta)
        else:
            want = apply_post_ops(ref_fwd(alg, xs, alpha, beta), po, binary_srcs=po_srcs)
        if typ.name == "f16":  # beyond f16's largest finite value the rounding gives inf
            want = np.where(np.abs(want) > 65504, np.copysign(np.inf, want), want)
        # the f32 formula's error, then one rounding to the type; each binary entry (f32, an
        # operand 0.5 <= |b| <= 4) can scale the f32 error by up to 5 relative to
        # max(1, |result|) (an add cancelling)
        tol = TOLERANCE * (1 + 4 * po.len()) + 2 * eps(typ) * (typ.name != "f32")
        line, fails = check_line("eltwise", desc, problem, _rel_err(out.to_numpy(), want),
                                 tol)
        print(line + f",impl={pd.impl_info_str()}", flush=True)
        return fails
    if mode != "P":
        raise invalid_arguments(f"--mode={mode}: the eltwise driver runs P or C")
    tmin, tmed = time_ms(lambda: prim.execute(s, args), min_seconds, s.wait)
    peer = None
    if compare == "torch":
        dev = torch_device(eng)
        ms = None if dev is None else _torch_ms(
            alg, alpha, beta, x, backward, dev, min_seconds, typ,
            TorchPostOps(po, po_srcs, dev) if len(po) and not backward else None)
        peer = ("torch", ms)
    copy = copy_gbs(eng, x.size * typ.itemsize, min_seconds=min(0.5, max(min_seconds, 0.05)))
    print(perf_line("eltwise", desc, problem, create_ms, tmin, tmed, nbytes=nbytes, peer=peer,
                    copy=copy) + f",impl={pd.impl_info_str()}", flush=True)
    return 0


def run(eng, problem: str, opts: dict[str, str], mode: str, compare: str | None,
        min_seconds: float) -> int:
    """Run ``problem`` (``NxCxDxHxW``) for every combination of the options; returns the
    number of failed checks."""
    check_options("eltwise", opts, _KNOWN, compare)
    dims = parse_dims(problem)
    mb = int(opts.get("mb", "0") or 0)
    if mb:
        dims[0] = mb
    dts = [d.strip() for d in opts.get("dt", "f32").split(",")]
    algs = [parse_alg(a) for a in opts.get("alg", "RELU").split(",")]
    dirs = [parse_dir(d) for d in opts.get("dir", "FWD_D").split(",")]
    alphas = [float(a) for a in opts.get("alpha", "0").split(",")]
    betas = [float(b) for b in opts.get("beta", "0").split(",")]
    tags = opts.get("tag", "abx").split(",")
    inplace = [_bool(v) for v in opts.get("inplace", "false").split(",")]
    post = opts.get("attr-post-ops", "").split(",")
    fails = 0
    for d, prop, alg, alpha, beta, t, ip, p in itertools.product(dts, dirs, algs, alphas, betas,
                                                                 tags, inplace, post):
        fails += run_one(eng, dims, alg, alpha, beta, prop, t, ip, mode, compare, min_seconds,
                         d, p)
    return fails
