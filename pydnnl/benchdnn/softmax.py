"""benchdnn's softmax driver: ``--softmax [--dir=FWD_D|FWD_I|BWD_D] [--alg=SOFTMAX|LOGSOFTMAX]
[--axis=1] [--sdt=f32|bf16|f16] [--ddt=f32|bf16|f16] [--stag=abx] [--dtag=any]
[--inplace=false] [--attr-post-ops=...] [--mb=0] NxCx...`` (backward: dst of ``--ddt``, diff
tensors of ``--sdt``).

As in oneDNN's benchdnn: ``--alg`` is ``SOFTMAX`` (``softmax_accurate``) or ``LOGSOFTMAX``
(``softmax_log``; ``ACCURATE`` and ``LOG`` are taken too), ``--axis`` the softmax axis,
``--stag``/``--dtag`` a oneDNN format tag or benchdnn's ``abx`` (plain), ``axb`` (channels
last), ``aBx8b``/``aBx16b`` (blocked channels), ``any`` (dst only); the older ``--dt`` and
``--tag`` set both tensors; ``--inplace`` forward needs ``--sdt`` equal to ``--ddt`` (else a
``skip`` line, as benchdnn skips it); ``--attr-post-ops`` benchdnn's post-op chain (the syntax of
``--conv``; forward only, and as in oneDNN eltwise and binary entries: ``add:f32:per_oc+relu``;
others print a ``skip,unimplemented`` line). Every option may list values separated by commas;
each combination runs. Mode C checks against the numpy reference, the post-op chain applied in
float64 (binary operands integers and halves); mode P prints times, GB/s of
bytes read and written, the copy kernel's GB/s and PyTorch's time with ``--compare=torch``.
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

_DIRS = {"FWD_D": prop_kind.forward_training, "FWD_I": prop_kind.forward_inference,
         "BWD_D": prop_kind.backward_data}
_ALGS = {"SOFTMAX": algorithm.softmax_accurate, "ACCURATE": algorithm.softmax_accurate,
         "LOGSOFTMAX": algorithm.softmax_log, "LOG": algorithm.softmax_log}
_KNOWN = {"dir", "alg", "axis", "sdt", "ddt", "dt", "stag", "dtag", "tag", "inplace", "mb",
          "attr-post-ops"}
TOLERANCE = 2e-5  # max |got - ref| / max(1, |ref|) in float32


def parse_alg(text: str) -> algorithm:
    try:
        return _ALGS[text.strip().upper()]
    except KeyError:
        raise invalid_arguments(f"--alg={text}: expected SOFTMAX or LOGSOFTMAX") from None


def parse_dir(text: str) -> prop_kind:
    try:
        return _DIRS[text.strip().upper()]
    except KeyError:
        raise invalid_arguments(f"--dir={text}: expected FWD_D, FWD_I or BWD_D") from None


def parse_tag(text: str, nd: int):
    """benchdnn tag -> a format tag name the memory.desc takes."""
    t = text.strip()
    if t == "any":
        return "any"
    if t == "abx":
        return "abcdefghijkl"[:nd]
    if t == "axb":
        return "a" + "cdefghijkl"[:max(0, nd - 2)] + "b" if nd >= 3 else "ab"[:nd]
    if t in ("aBx8b", "aBx16b"):
        names = {3: f"nCw{t[3:-1]}c", 4: f"nChw{t[3:-1]}c", 5: f"nCdhw{t[3:-1]}c"}
        if nd not in names:
            raise unimplemented(f"--tag={t}: blocked channels need 3 to 5 dims, got {nd}")
        return names[nd]
    return t


def parse_bool(name: str, text: str) -> bool:
    v = text.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no", ""):
        return False
    raise invalid_arguments(f"--{name}={text}: expected true or false")


DTS = ("f32", "bf16", "f16")
# max |got - ref| / max(1, |ref|) per output type: the type's epsilon (bf16 2^-8, f16 2^-11;
# the output's rounding is half of it) over the reference of the inputs as stored
TOLERANCES = {"f32": TOLERANCE, "bf16": 2.0 ** -8, "f16": 2.0 ** -11}


def check_dt(opts: dict[str, str], names=("sdt", "ddt", "dt")) -> None:
    for n in names:
        for d in opts.get(n, "f32").split(","):
            if d.strip() not in DTS:
                raise unimplemented(f"--{n}={d}: f32, bf16 and f16 are implemented")


def rel_err(got, want) -> float:
    got = np.asarray(got, np.float64)
    same = (np.isnan(got) & np.isnan(want)) | (got == want)
    err = np.where(same, 0.0, np.abs(got - want) / np.maximum(1.0, np.abs(want)))
    return float(np.nan_to_num(err, nan=np.inf).max()) if err.size else 0.0


def _torch_ms(alg, axis, x, backward, device, min_seconds, post=None) -> float | None:
    """PyTorch's time (forward: with the post-op chain ``post``, a
    :class:`.common.TorchPostOps`), None where torch has no counterpart."""
    import torch
    import torch.nn.functional as F

    fn = F.log_softmax if alg == algorithm.softmax_log else F.softmax
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    t = torch.from_numpy(np.ascontiguousarray(x, np.float32)).to(device)
    if not backward:
        if post is not None:
            if post.missing:
                return None
            with torch.no_grad():
                return time_ms(lambda: post(fn(t, axis)), min_seconds, sync)[0]
        with torch.no_grad():
            return time_ms(lambda: fn(t, axis), min_seconds, sync)[0]
    t.requires_grad_(True)
    y = fn(t, axis)
    g = torch.ones_like(y)
    return time_ms(lambda: torch.autograd.grad(y, t, g, retain_graph=True), min_seconds,
                   sync)[0]


def run_one(eng, dims, prop, alg, axis, stag, dtag, inplace, mode, compare,
            min_seconds, sdt="f32", ddt="f32", post_ops: str = "") -> int:
    import pydnnl as dnnl

    from ..reference.post_ops import apply_post_ops
    from ..reference.softmax import softmax_backward as ref_bwd
    from ..reference.softmax import softmax_forward as ref_fwd
    from .binary import data

    sd, dd_t = dnnl.memory.data_type[sdt], dnnl.memory.data_type[ddt]
    dname = [k for k, v in _DIRS.items() if v == prop][0]
    aname = "LOGSOFTMAX" if alg == algorithm.softmax_log else "SOFTMAX"
    desc = (f"--dir={dname} --alg={aname} --axis={axis} --sdt={sdt} --ddt={ddt} --stag={stag} "
            f"--dtag={dtag}"
            + (" --inplace=true" if inplace else "")
            + (f" --attr-post-ops={post_ops}" if post_ops else ""))
    problem = "x".join(map(str, dims))
    backward = prop == prop_kind.backward_data
    nd = len(dims)
    if inplace and not backward and sdt != ddt:  # as benchdnn: dst would be src's type
        print(f"skip,invalid_arguments,softmax,{desc},{problem},in-place forward needs --sdt "
              f"equal to --ddt", flush=True)
        return 0
    po = parse_post_ops(post_ops, dims)
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    t0 = time.perf_counter()
    src_md = dnnl.memory.desc(dims, sd, parse_tag(stag, nd))
    dst_md = src_md if inplace else dnnl.memory.desc(dims, dd_t, parse_tag(dtag, nd))
    try:
        fpd = dnnl.softmax_forward.primitive_desc(
            eng, prop_kind.forward_training if backward else prop, alg, src_md, dst_md, axis,
            attr=None if backward else attr)
        if backward:
            # backward: dst of --ddt, diff_dst and diff_src of --sdt; oneDNN defines no
            # post-ops for backward: the backward pd refuses them
            diff = fpd.dst_desc().with_data_type(sd)
            pd = dnnl.softmax_backward.primitive_desc(eng, alg, diff, diff, fpd.dst_desc(),
                                                      axis, fpd, attr=attr)
            prim = dnnl.softmax_backward(pd)
        else:
            pd, prim = fpd, dnnl.softmax_forward(fpd)
    except unimplemented as e:
        print(f"skip,unimplemented,softmax,{desc},{problem},{e}", flush=True)
        return 0
    create_ms = (time.perf_counter() - t0) * 1e3
    s = dnnl.stream(eng)
    rng = np.random.default_rng(1)
    x = rng.uniform(-8.0, 8.0, dims).astype(np.float32)
    po_srcs: dict[int, np.ndarray] = {}
    if not backward:
        src = dnnl.memory(pd.src_desc(), eng, x)
        x = np.asarray(src.to_numpy(), np.float64)  # as stored
        dst = src if inplace else dnnl.memory(pd.dst_desc(), eng)
        args, out = {ARG_SRC: src, ARG_DST: dst}, dst
        nbytes = x.size * (sd.itemsize + dd_t.itemsize)
        # each binary entry (an f32 operand 0.5 <= |b| <= 4) can scale the f32 formula's
        # error by up to 5 relative to max(1, |result|) (an add cancelling)
        tol = TOLERANCES[ddt] + 4 * TOLERANCE * po.len()
        for i, pdims in post_op_operands(po).items():  # integers and halves, no zero (div)
            args[ARG_ATTR_MULTIPLE_POST_OP(i) | ARG_SRC_1], po_srcs[i] = post_op_operand(
                po.get_params_binary(i)[1], eng, data(pdims, 10 + i, nonzero=True))
            nbytes += po.get_params_binary(i)[1].get_size()
    else:
        dst = dnnl.memory(pd.dst_desc(), eng, ref_fwd(alg, x, axis).astype(np.float32))
        y = np.asarray(dst.to_numpy(), np.float64)
        ddm = dnnl.memory(pd.diff_dst_desc(), eng,
                          rng.uniform(-1.0, 1.0, dims).astype(np.float32))
        dd = np.asarray(ddm.to_numpy(), np.float64)
        dsm = ddm if inplace else dnnl.memory(pd.diff_src_desc(), eng)
        args = {ARG_DST: dst, ARG_DIFF_DST: ddm, ARG_DIFF_SRC: dsm}
        out, nbytes = dsm, x.size * (2 * sd.itemsize + dd_t.itemsize)
        tol = TOLERANCES[sdt]
    if mode == "C":
        prim.execute(s, args)
        s.wait()
        want = (ref_bwd(alg, dd, y, axis) if backward
                else apply_post_ops(ref_fwd(alg, x, axis), po, binary_srcs=po_srcs))
        line, fails = check_line("softmax", desc, problem, rel_err(out.to_numpy(), want), tol)
        print(line + f",impl={pd.impl_info_str()}", flush=True)
        return fails
    if mode != "P":
        raise invalid_arguments(f"--mode={mode}: the softmax driver runs P or C")
    tmin, tmed = time_ms(lambda: prim.execute(s, args), min_seconds, s.wait)
    peer = None
    if compare == "torch":
        dev = torch_device(eng)
        post = TorchPostOps(po, po_srcs, dev) if dev and len(po) and not backward else None
        peer = ("torch", None if dev is None else _torch_ms(alg, axis, x, backward, dev,
                                                            min_seconds, post))
    copy = copy_gbs(eng, x.size * sd.itemsize, min_seconds=min(0.5, max(min_seconds, 0.05)))
    print(perf_line("softmax", desc, problem, create_ms, tmin, tmed, nbytes=nbytes, peer=peer,
                    copy=copy) + f",impl={pd.impl_info_str()}", flush=True)
    return 0


def run(eng, problem: str, opts: dict[str, str], mode: str, compare: str | None,
        min_seconds: float) -> int:
    """Run ``problem`` (``NxCx...``) for every combination of the options; returns the number
    of failed checks."""
    check_options("softmax", opts, _KNOWN, compare)
    check_dt(opts)
    dims = parse_dims(problem)
    mb = int(opts.get("mb", "0") or 0)
    if mb:
        dims[0] = mb
    dirs = [parse_dir(v) for v in opts.get("dir", "FWD_D").split(",")]
    algs = [parse_alg(v) for v in opts.get("alg", "SOFTMAX").split(",")]
    try:
        axes = [int(v) for v in opts.get("axis", "1").split(",")]
    except ValueError:
        raise invalid_arguments(f"--axis={opts['axis']}: expected an integer") from None
    stags = opts.get("stag", opts.get("tag", "abx")).split(",")
    dtags = opts.get("dtag", opts.get("tag", "any")).split(",")
    inplace = [parse_bool("inplace", v) for v in opts.get("inplace", "false").split(",")]
    sdts = [v.strip() for v in opts.get("sdt", opts.get("dt", "f32")).split(",")]
    ddts = [v.strip() for v in opts.get("ddt", opts.get("dt", "f32")).split(",")]
    post = opts.get("attr-post-ops", "").split(",")
    fails = 0
    for prop, alg, axis, st, dt_, ip, sdt, ddt, p in itertools.product(
            dirs, algs, axes, stags, dtags, inplace, sdts, ddts, post):
        fails += run_one(eng, dims, prop, alg, axis, st, dt_, ip, mode, compare, min_seconds,
                         sdt, ddt, p)
    return fails
