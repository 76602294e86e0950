"""benchdnn's pooling driver: ``--pool [--dir=FWD_D|FWD_I|BWD_D] [--alg=max|avg_np|avg_p]
[--tag=abx] [--dt=f32|bf16|f16] [--attr-post-ops=...] [--mb=0] PROBLEM``.

The problem descriptor is benchdnn's
``mbXicX_idXihXiwX_odXohXowX_kdXkhXkwX_sdXshXswX_pdXphXpwX_ddXdhXdwX_nNAME`` (``_`` ignored,
``n`` starts the name). As benchdnn's ``str2desc``: ``mb`` defaults to 2, strides to 1,
dilations to 0 (oneDNN's: 0 = dense); ``ic`` and, for every spatial dim used, the input size
and kernel are required; a dim is used when its input, kernel, output or dilation is given, its
stride is not 1 or its padding is positive; the problem is 3-D when depth is used, else 2-D when
height is, else 1-D, and unused lower dims copy the highest one used (``ih`` only is square).
A missing output is ``(i - ext + 2p) / s + 1`` (``p`` 0 when not given), a missing padding
``((o-1)*s - i + ext) / 2``, and the right padding ``(o-1)*s - i + ext - p`` (C division;
``ext = (k-1)*(d+1)+1``).

``--alg`` takes ``max``, ``avg_np`` (exclude padding) or ``avg_p`` (include padding), or the
``pooling_*`` names, any case; ``--tag`` a oneDNN format tag or benchdnn's ``abx``, ``axb``,
``aBx8b``, ``aBx16b``; ``--attr-post-ops`` benchdnn's post-op chain (the syntax of ``--conv``;
forward only, and as in oneDNN eltwise and binary entries: ``add:f32:per_oc+relu``; others
print a ``skip,unimplemented`` line); every option may list values separated by commas, each
combination runs. Mode C checks against the numpy reference (``BWD_D`` through the forward's
workspace; forward with the post-op chain applied in float64, binary operands integers and
halves);
mode P prints times, GB/s of the bytes read and written (src, dst and the workspace forward;
diff_dst, diff_src and the workspace backward), the copy kernel's GB/s and PyTorch's time with
``--compare=torch``.
"""
from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass, replace

import numpy as np

from ..constants import (
    ARG_ATTR_MULTIPLE_POST_OP,
    ARG_DIFF_DST,
    ARG_DIFF_SRC,
    ARG_DST,
    ARG_SRC,
    ARG_SRC_1,
    ARG_WORKSPACE,
    algorithm,
    prop_kind,
)
from ..error import invalid_arguments, unimplemented
from .common import (
    TorchPostOps,
    check_line,
    check_options,
    copy_gbs,
    parse_post_ops,
    perf_line,
    post_op_operand,
    post_op_operands,
    time_ms,
    torch_device,
)

_DIRS = {"FWD_D": prop_kind.forward_training, "FWD_I": prop_kind.forward_inference,
         "BWD_D": prop_kind.backward_data}
_ALGS = {"max": algorithm.pooling_max, "avg_np": algorithm.pooling_avg_exclude_padding,
         "avg_p": algorithm.pooling_avg_include_padding}
_REF = {algorithm.pooling_max: "max",
        algorithm.pooling_avg_exclude_padding: "avg_exclude_padding",
        algorithm.pooling_avg_include_padding: "avg_include_padding"}
_KNOWN = {"alg", "dir", "tag", "dt", "cfg", "mb", "attr-post-ops"}
_KEYS = ("mb", "ic", "id", "ih", "iw", "od", "oh", "ow", "kd", "kh", "kw", "sd", "sh", "sw",
         "pd", "ph", "pw", "dd", "dh", "dw")
_TOKEN = re.compile("(" + "|".join(_KEYS) + r")(\d+)")
# max |got - ref| / max(1, |ref|): f32 arithmetic, then one rounding to the storage type
# (unit roundoff 2^-9 bf16, 2^-12 f16; twice that allowed)
TOLERANCE = {"f32": 1e-5, "bf16": 2.0 ** -8, "f16": 2.0 ** -11}


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


@dataclass(frozen=True)
class PoolDesc:
    """One benchdnn pooling problem; spatial tuples hold only the problem's dims (W last)."""

    mb: int
    ic: int
    src: tuple[int, ...]
    dst: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    padding_l: tuple[int, ...]
    padding_r: tuple[int, ...]
    dilation: tuple[int, ...]
    name: str = ""

    def to_str(self) -> str:
        axes = "dhw"[3 - len(self.src):]
        groups = list(zip(self.src, self.dst, self.kernel, self.strides, self.padding_l,
                          self.dilation))
        if all(g == groups[0] for g in groups):  # square or cubic: the highest dim only
            axes = axes[:1]

        def sp(what, vals):
            return "".join(f"{what}{a}{v}" for a, v in zip(axes, vals))

        out = (f"mb{self.mb}ic{self.ic}" + sp("i", self.src) + sp("o", self.dst)
               + sp("k", self.kernel))
        if any(v != 1 for v in self.strides):
            out += sp("s", self.strides)
        out += sp("p", self.padding_l)
        if any(self.dilation):
            out += sp("d", self.dilation)
        return out + (f"n{self.name}" if self.name else "")

    @property
    def src_dims(self) -> list[int]:
        return [self.mb, self.ic, *self.src]

    @property
    def dst_dims(self) -> list[int]:
        return [self.mb, self.ic, *self.dst]


def parse_problem(text: str) -> PoolDesc:
    """benchdnn's pooling descriptor -> :class:`PoolDesc` (see the module docstring)."""
    t = text.strip()
    v: dict[str, int] = {}
    name, pos = "", 0
    while pos < len(t):
        if t[pos] == "_":
            pos += 1
            continue
        m = _TOKEN.match(t, pos)
        if m:
            v[m.group(1)] = int(m.group(2))
            pos = m.end()
            continue
        if t[pos] == "n":
            name = t[pos + 1:].strip().strip('"')
            break
        raise invalid_arguments(f"pool problem {text!r}: cannot parse {t[pos:]!r}; expected "
                                f"mbXicX_idXihXiwX_odXohXowX_kdXkhXkwX_sdXshXswX_pdXphXpwX_"
                                f"ddXdhXdwX_nNAME")
    if v.get("ic", 0) < 1:
        raise invalid_arguments(f"pool problem {text!r}: ic (channels) is required and must be "
                                f"positive")
    mb = v.get("mb", 2)
    used = {a: any(v.get(f"{q}{a}", 0) for q in "iokd") or v.get(f"s{a}", 1) != 1
            or v.get(f"p{a}", 0) >= 1 for a in "dhw"}
    top = next((a for a in "dhw" if used[a]), None)
    if top is None:
        raise invalid_arguments(f"pool problem {text!r}: no spatial size given (iw, ih or id)")
    axes = "dhw"["dhw".index(top):]
    dims = {}
    for a in axes:
        src_axis = a if used[a] else top
        dims[a] = {q: v.get(f"{q}{src_axis}") for q in "ioksdp"}
    out = {k: [] for k in ("src", "dst", "kernel", "strides", "padding_l", "padding_r",
                           "dilation")}
    for a in axes:
        g = dims[a]
        i, k, o, p = g["i"], g["k"], g["o"], g["p"]
        s = 1 if g["s"] is None else g["s"]
        d = 0 if g["d"] is None else g["d"]
        if not i or not k:
            raise invalid_arguments(f"pool problem {text!r}: i{a} and k{a} are required for "
                                    f"the {a} dimension")
        if s < 1:
            raise invalid_arguments(f"pool problem {text!r}: s{a} must be positive, got {s}")
        ext = (k - 1) * (d + 1) + 1
        if not o:
            p = p or 0
            o = _c_div(i - ext + 2 * p, s) + 1
        elif p is None:
            p = _c_div((o - 1) * s - i + ext, 2)
        if o < 1:
            raise invalid_arguments(f"pool problem {text!r}: the {a} output size is {o}")
        for key, val in (("src", i), ("dst", o), ("kernel", k), ("strides", s),
                         ("padding_l", p), ("padding_r", (o - 1) * s - i + ext - p),
                         ("dilation", d)):
            out[key].append(val)
    return PoolDesc(mb=mb, ic=v["ic"], name=name, **{k: tuple(x) for k, x in out.items()})


def parse_alg(text: str) -> algorithm:
    t = text.strip().lower().removeprefix("pooling_")
    t = {"avg_exclude_padding": "avg_np", "avg_include_padding": "avg_p"}.get(t, t)
    if t not in _ALGS:
        raise invalid_arguments(f"--alg={text}: expected max, avg_np or avg_p")
    return _ALGS[t]


def parse_dir(text: str) -> prop_kind:
    try:
        return _DIRS[text.strip().upper()]
    except KeyError:
        raise invalid_arguments(f"--dir={text}: expected FWD_D, FWD_I or BWD_D") from None


def _tag(text: str, nd: int) -> str:
    t = text.strip()
    if t == "abx":
        return "abcde"[:nd]
    if t == "axb":
        return "a" + "cde"[:nd - 2] + "b"
    if t in ("aBx8b", "aBx16b"):
        return {3: "nCw", 4: "nChw", 5: "nCdhw"}[nd] + t[3:-1] + "c"
    return t


def _values(opts: dict, key: str, default: str) -> list[str]:
    return [x for x in opts.get(key, default).split(",") if x]


def _torch_ms(p: PoolDesc, alg, backward: bool, x, device, min_seconds,
              post=None) -> float | None:
    """PyTorch's time (forward: with the post-op chain ``post``, a
    :class:`.common.TorchPostOps`), None where torch has no counterpart."""
    import torch
    import torch.nn.functional as F

    nsp = len(p.src)
    # torch pads symmetrically (at most half the kernel): comparable when its output, with
    # padding_l on both sides, has our size (a smaller right padding then drops no window)
    for i, o, k, s, pl, d in zip(p.src, p.dst, p.kernel, p.strides, p.padding_l, p.dilation):
        if pl * 2 > k or (i + 2 * pl - (k - 1) * (d + 1) - 1) // s + 1 != o:
            return None
    kw = dict(kernel_size=p.kernel, stride=p.strides, padding=p.padding_l)
    if alg == algorithm.pooling_max:
        fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nsp]
        kw["dilation"] = tuple(d + 1 for d in p.dilation)
    else:
        if any(p.dilation):
            return None
        fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[nsp]
        kw["count_include_pad"] = alg == algorithm.pooling_avg_include_padding
    t = torch.from_numpy(x).to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if not backward:
        if post is not None:
            if post.missing:
                return None
            with torch.no_grad():
                return time_ms(lambda: post(fn(t, **kw)), min_seconds, sync)[0]
        with torch.no_grad():
            return time_ms(lambda: fn(t, **kw), min_seconds, sync)[0]
    t.requires_grad_(True)
    y = fn(t, **kw)
    g = torch.ones_like(y)
    return time_ms(lambda: torch.autograd.grad(y, t, g, retain_graph=True), min_seconds,
                   sync)[0]


def run_one(eng, p: PoolDesc, alg, prop, tag_text, mode, compare, min_seconds,
            dt: str = "f32", post_ops: str = "") -> int:
    import pydnnl as dnnl

    from ..reference.pooling import pooling_backward as ref_bwd
    from ..reference.pooling import pooling_forward as ref_fwd
    from ..reference.post_ops import apply_post_ops
    from .binary import data

    f32 = dnnl.memory.data_type[dt]
    dirname = [k for k, v in _DIRS.items() if v == prop][0]
    short = {v: k for k, v in _ALGS.items()}[alg]
    desc = (f"--dt={dt} --dir={dirname} --alg={short} --tag={tag_text}"
            + (f" --attr-post-ops={post_ops}" if post_ops else ""))
    problem = p.to_str()
    nd = 2 + len(p.src)
    layout = _tag(tag_text, nd)
    backward = prop == prop_kind.backward_data
    params = (list(p.strides), list(p.kernel), list(p.dilation), list(p.padding_l),
              list(p.padding_r))
    src_md = dnnl.memory.desc(p.src_dims, f32, layout)
    dst_md = dnnl.memory.desc(p.dst_dims, f32, layout)
    po = parse_post_ops(post_ops, p.dst_dims)
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    t0 = time.perf_counter()
    try:
        fpd = dnnl.pooling_forward.primitive_desc(
            eng, prop_kind.forward_training if backward else prop, alg, src_md, dst_md,
            *params, attr=None if backward else attr)
        fwd = dnnl.pooling_forward(fpd)
        if backward:  # oneDNN defines no post-ops for backward: the backward pd refuses them
            bpd = dnnl.pooling_backward.primitive_desc(eng, alg, src_md, dst_md, *params, fpd,
                                                       attr=attr)
            bwd = dnnl.pooling_backward(bpd)
    except unimplemented as e:
        print(f"skip,unimplemented,pool,{desc},{problem},{e}", flush=True)
        return 0
    create_ms = (time.perf_counter() - t0) * 1e3
    s = dnnl.stream(eng)
    rng = np.random.default_rng(1)
    x = rng.standard_normal(p.src_dims).astype(np.float32)
    src = dnnl.memory(src_md, eng, x)
    x = src.to_numpy().astype(np.float32)  # the values as stored (bf16/f16 rounded)
    dst = dnnl.memory(dst_md, eng)
    fargs = {ARG_SRC: src, ARG_DST: dst}
    po_srcs: dict[int, np.ndarray] = {}
    for i, pdims in post_op_operands(po).items():  # integers and halves, no zero (div)
        fargs[ARG_ATTR_MULTIPLE_POST_OP(i) | ARG_SRC_1], po_srcs[i] = post_op_operand(
            po.get_params_binary(i)[1], eng, data(pdims, 10 + i, nonzero=True))
    ws = None
    if not fpd.workspace_desc().is_zero():
        ws = fargs[ARG_WORKSPACE] = dnnl.memory(fpd.workspace_desc(), eng)
    ws_bytes = 0 if ws is None else fpd.workspace_desc().get_size()
    if backward:
        fwd.execute(s, fargs)
        g = rng.standard_normal(p.dst_dims).astype(np.float32)
        gm = dnnl.memory(dst_md, eng, g)
        g = gm.to_numpy().astype(np.float32)
        dsm = dnnl.memory(src_md, eng)
        args = {ARG_DIFF_DST: gm, ARG_DIFF_SRC: dsm}
        if ws is not None:
            args[ARG_WORKSPACE] = ws
        prim, out, pd = bwd, dsm, bpd
    else:
        args, prim, out, pd = fargs, fwd, dst, fpd
    nbytes = src_md.get_size() + dst_md.get_size() + ws_bytes + (
        0 if backward else sum(v.nbytes for v in po_srcs.values()))
    if mode == "C":
        prim.execute(s, args)
        s.wait()
        want, want_ws = ref_fwd(x, _REF[alg], *params[1::-1], *params[2:])
        if backward:
            want = ref_bwd(g, p.src_dims, _REF[alg], *params[1::-1], *params[2:],
                           workspace=want_ws)
        else:
            want = apply_post_ops(want, po, binary_srcs=po_srcs)
        got = out.to_numpy().astype(np.float64)
        err = float(np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want))))
        # each binary entry (an f32 operand 0.5 <= |b| <= 4) can scale the f32 error by up
        # to 5 relative to max(1, |result|) (an add cancelling)
        line, fails = check_line("pool", desc, problem, err,
                                 TOLERANCE[dt] + 4 * TOLERANCE["f32"] * po.len())
        print(line + f",impl={pd.impl_info_str()}", flush=True)
        return fails
    if mode != "P":
        raise invalid_arguments(f"--mode={mode}: the pool driver runs P or C")
    tmin, tmed = time_ms(lambda: prim.execute(s, args), min_seconds, s.wait)
    peer = None
    if compare == "torch":
        dev = torch_device(eng)
        post = TorchPostOps(po, po_srcs, dev) if dev and len(po) and not backward else None
        peer = ("torch", None if dev is None else _torch_ms(p, alg, backward, x, dev,
                                                             min_seconds, post))
    copy = copy_gbs(eng, max(src_md.get_size(), dst_md.get_size()),
                    min_seconds=min(0.5, max(min_seconds, 0.05)))
    print(perf_line("pool", desc, problem, create_ms, tmin, tmed, nbytes=nbytes, peer=peer,
                    copy=copy) + f",impl={pd.impl_info_str()}", flush=True)
    return 0


def run(eng, problem: str, opts: dict[str, str], mode: str, compare: str | None,
        min_seconds: float) -> int:
    """Run ``problem`` for every combination of the listed options; returns the failures."""
    check_options("pool", opts, _KNOWN, None)
    dts = []
    for key in ("dt", "cfg"):
        for v in _values(opts, key, ""):
            parts = set(v.strip().lower().split(":"))
            if len(parts) != 1 or not parts <= {"f32", "bf16", "f16"}:
                raise unimplemented(f"--{key}={v}: f32, bf16 and f16 (src and dst alike) are "
                                    f"implemented")
            dts.append(parts.pop())
    base = parse_problem(problem)
    algs = [parse_alg(a) for a in _values(opts, "alg", "max")]
    dirs = [parse_dir(d) for d in _values(opts, "dir", "FWD_D")]
    tags = _values(opts, "tag", "abx")
    mbs = [int(m) for m in _values(opts, "mb", "0")]
    post = opts.get("attr-post-ops", "").split(",")
    fails = 0
    for dt, alg, prop, tag_text, mb, po in itertools.product(dts or ["f32"], algs, dirs, tags,
                                                              mbs, post):
        p = replace(base, mb=mb) if mb else base
        fails += run_one(eng, p, alg, prop, tag_text, mode, compare, min_seconds, dt, po)
    return fails
