"""What the primitive drivers share: benchdnn's dims syntax, timing, the device's copy
bandwidth (the yardstick of memory-bound primitives), the PyTorch peer and the output lines."""
from __future__ import annotations

import time

import numpy as np

from ..error import invalid_arguments

# Calls queued back to back per timed batch, as primitives follow each other in a network
BATCH_CALLS = 10


def check_options(driver: str, opts: dict, known, compare: str | None,
                  peers: tuple = ("torch",)) -> None:
    """Refuse options ``driver`` does not take and peers it cannot compare with."""
    unknown = set(opts) - set(known)
    if unknown:
        raise invalid_arguments(f"--{driver}: unknown option(s) {', '.join(sorted(unknown))}; "
                                f"it takes {', '.join(sorted(known))}")
    if compare not in (None, *peers):
        raise invalid_arguments(f"--compare={compare}: the {driver} driver compares with "
                                f"{' or '.join(peers)}")


def random_args(pd, eng, seed: int = 0) -> tuple[dict, dict]:
    """``(values, memories)``: standard-normal f32 values for every argument of ``pd`` and
    memories holding them in the primitive's layouts."""

    rng = np.random.default_rng(seed)
    values, args = {}, {}
    for arg, spec in pd.arg_specs().items():
        values[arg] = rng.standard_normal(spec.md.dims).astype(np.float32)
        args[arg] = argument_memory(spec.md, eng, typed_values(values[arg], spec.md.data_type))
        if spec.md.data_type.name != "f32":  # the values as stored (bf16/f16: rounded)
            values[arg] = args[arg].to_numpy().astype(np.float32)
    return values, args


def argument_memory(md, eng, values: np.ndarray):
    """A memory of ``md`` on ``eng`` holding ``values``; a host scalar's desc (a scale or
    zero point passed on the host) gets a host-scalar memory of the first value."""
    import pydnnl as dnnl

    if md.is_host_scalar():
        return dnnl.memory(md, np.asarray(values).reshape(-1)[0].item())
    return dnnl.memory(md, eng, values)


_INT_TYPES = {"s8": np.int8, "u8": np.uint8, "s32": np.int32}


def typed_values(values: np.ndarray, dt) -> np.ndarray:
    """``values`` (float32) in a form a memory of data type ``dt`` takes: integer types get
    nonzero integers away from zero (``u8``: of the magnitude), so that a ``div`` operand
    never divides by zero; floating types get ``values`` (a bf16/f16 memory rounds them)."""
    name = getattr(dt, "name", str(dt))
    if name not in _INT_TYPES:
        return values
    v = values.astype(np.float64)
    ints = np.where(v >= 0, np.floor(v) + 1, np.ceil(v) - 1)
    if name == "u8":
        ints = np.abs(ints)
    return np.clip(ints, -127, 127).astype(_INT_TYPES[name])


def post_op_operand(md, eng, values: np.ndarray):
    """``(memory, stored)``: a memory of the binary post-op operand desc ``md`` holding
    ``values`` as its data type stores them (:func:`typed_values`), and those stored values
    as float32 for the reference."""
    import pydnnl as dnnl

    mem = dnnl.memory(md, eng, typed_values(values, md.data_type))
    stored = values if md.data_type.name == "f32" else mem.to_numpy().astype(np.float32)
    return mem, stored


# an output stored in bf16 (f16) is off by up to half its spacing, 2^-9 (2^-12) of its
# magnitude, so of the largest |reference|; twice that leaves room for the f32 chain before it
STORE_RTOL = {"bf16": 2.0 ** -8, "f16": 2.0 ** -10}


def store_rtol(dts) -> float:
    """The rounding allowance of outputs of any of the data types ``dts``."""
    return max((STORE_RTOL.get(getattr(d, "name", str(d)), 0.0) for d in dts), default=0.0)


def parse_dims(text: str) -> list[int]:
    """``8x16x32x32`` -> ``[8, 16, 32, 32]``."""
    try:
        dims = [int(v) for v in text.lower().split("x")]
    except ValueError:
        raise invalid_arguments(f"problem {text!r}: expected dims as AxBxC..., e.g. "
                                f"8x16x32x32") from None
    if not dims or min(dims) < 1:
        raise invalid_arguments(f"problem {text!r}: every dim must be a positive integer")
    return dims


def parse_dims_list(text: str) -> list[list[int]]:
    """``8x16x3x3:8x16x1x1`` -> one dims list per ``:``-separated tensor."""
    return [parse_dims(t) for t in text.split(":")]


def time_ms(fn, min_seconds: float, sync=lambda: None) -> tuple[float, float]:
    """(min, median) ms per call of ``fn`` over batches of ``BATCH_CALLS`` queued calls, each
    batch ended by ``sync``; at least 5 batches, then until ``min_seconds`` have passed."""
    fn()
    sync()
    times = []
    t_end = time.perf_counter() + min_seconds
    while len(times) < 5 or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        for _ in range(BATCH_CALLS):
            fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3 / BATCH_CALLS)
        if len(times) >= 1000:
            break
    return min(times), float(np.median(times))


_COPY_SRC = """__kernel void pydnnl_copy4(__global const float4 *restrict src,
                          __global float4 *restrict dst)
{
    dst[get_global_id(0)] = src[get_global_id(0)];
}
"""


_COPY_CACHE: dict = {}


def copy_gbs(eng, nbytes: int, min_seconds: float = 0.5) -> float:
    """The device's copy bandwidth in GB/s (bytes read plus bytes written per second) from a
    float4 copy kernel over ``nbytes`` bytes (one float4 per work-item, work-groups of 256:
    CPU runtimes vectorize across work-items, GPUs coalesce), timed like the primitives."""
    import pydnnl as dnnl

    from ..kernels.source import KernelSource
    from ..runtime.kernel import Kernel

    n4 = max(256, nbytes // 16 // 256 * 256)
    key = (id(eng.context), n4)  # one measurement per device and size in a process
    if key in _COPY_CACHE:
        return _COPY_CACHE[key]
    src = KernelSource("pydnnl_copy4", _COPY_SRC, (n4,), (256,), ("src", "dst"))
    k = Kernel(eng.context, eng.device, src)
    md = dnnl.memory.desc([n4 * 4], dnnl.memory.data_type.f32, dnnl.memory.format_tag.a)
    a, b = dnnl.memory(md, eng), dnnl.memory(md, eng)
    s = dnnl.stream(eng)
    tmin, _ = time_ms(lambda: k(s, a.buffer, b.buffer), min_seconds, s.wait)
    _COPY_CACHE[key] = 2 * n4 * 16 / (tmin * 1e-3) / 1e9
    return _COPY_CACHE[key]


# --attr-fpmath: tf32 rounds each input to 10 mantissa bits, so a K-long dot product is off by
# about 2^-11 * sqrt(K) of its scale; benchdnn likewise relaxes its threshold for tf32. f16
# keeps 10 bits too, bf16 7 (8x the rounding)
TF32_RTOL = 2e-3
FPMATH_RTOL = {"tf32": TF32_RTOL, "f16": TF32_RTOL, "bf16": 8 * TF32_RTOL}
# the spacing at 1 of each reduced format, for formulas written in epsilons
FPMATH_EPS = {"tf32": 2.0 ** -10, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}


def fpmath_attr(opts: dict, attr) -> str:
    """Apply ``--attr-fpmath=MODE[:true]`` to ``attr``; returns the reduced format the mode
    lets GEMMs compute in (``"tf32"`` for tf32 and any, ``"bf16"``, ``"f16"``) or ``""``
    for strict. Checks then allow that format's rounding (:data:`FPMATH_RTOL`): devices
    without such tensor cores compute in f32 all the same, well within it."""
    text = str(opts.get("attr-fpmath", "")).strip()
    if not text:
        return ""
    mode, _, to_int = text.partition(":")
    attr.set_fpmath_mode(mode, to_int.lower() == "true")
    from ..runtime.fpmath import gemm_math

    kind = gemm_math(attr.get_fpmath_mode())
    return "" if kind == "strict" else kind


def fpmath_rtol(kind: str, strict: float) -> float:
    """The relative tolerance of a check under ``kind`` (:func:`fpmath_attr`), ``strict``
    without one."""
    return FPMATH_RTOL.get(kind, strict)


def torch_tf32(device: str | None, allow) -> None:
    """The CUDA peer computes as pydnnl may: TF32 where the fpmath mode allows a reduced
    format (PyTorch has no bf16/f16 mode for f32 products; TF32 is its nearest)."""
    if device == "cuda":
        import torch

        torch.backends.cuda.matmul.allow_tf32 = bool(allow)
        torch.backends.cudnn.allow_tf32 = bool(allow)


def torch_device(eng) -> str | None:
    """``"cuda"`` or ``"cpu"`` for PyTorch comparisons on ``eng``'s kind, or None when torch
    (or its CUDA, for a GPU engine) is not available."""
    try:
        import torch
    except ImportError:
        return None
    if eng.info.is_gpu:
        return "cuda" if torch.cuda.is_available() else None
    return "cpu"


def torch_time_ms(fn, device: str, min_seconds: float) -> float:
    """Minimum ms per call of a PyTorch callable on ``device``."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with torch.no_grad():
        return time_ms(fn, min_seconds, sync)[0]


def perf_line(driver: str, desc: str, problem: str, create_ms: float, tmin: float, tmed: float,
              nbytes: int | None = None, flops: float | None = None,
              peer: tuple[str, float | None] | None = None, copy: float | None = None) -> str:
    """One ``perf`` line: times, GB/s over ``nbytes`` moved (with the copy kernel's GB/s and the
    fraction of it), GFLOP/s, and a peer's time with the ratio peer/pydnnl from minimum times."""
    line = (f"perf,{driver},{desc},{problem},create_ms={create_ms:.1f},min_ms={tmin:.4f},"
            f"median_ms={tmed:.4f}")
    if nbytes is not None:
        gbs = nbytes / (tmin * 1e-3) / 1e9
        line += f",gbs={gbs:.1f}"
        if copy:
            line += f",copy_gbs={copy:.1f},of_copy={gbs / copy:.2f}"
    if flops is not None:
        line += f",gflops={flops / (tmin * 1e-3) / 1e9:.1f}"
    if peer is not None:
        name, ms = peer
        line += f",{name}_ms={ms:.4f},speed_vs_{name}={ms / tmin:.2f}x" if ms else f",{name}=n/a"
    return line


def check_line(driver: str, desc: str, problem: str, err: float, tol: float) -> tuple[str, int]:
    """A ``check`` line and its failure count (0 or 1)."""
    ok = err <= tol
    return (f"check,{'passed' if ok else 'FAILED'},{driver},{desc},{problem},"
            f"max_rel_err={err:.2e}", 0 if ok else 1)


_BINARY_NAMES = ("add", "mul", "max", "min", "div", "sub", "ge", "gt", "le", "lt", "eq", "ne")


# binary post-op operand data types (converted to f32 on load by every fusing family)
POST_OP_OPERAND_TYPES = ("f32", "bf16", "f16", "s8", "u8", "s32")


def parse_post_ops(text: str, dst_dims, oc_dim: int = 1):
    """A ``pydnnl.post_ops`` from benchdnn's ``--attr-post-ops`` syntax: entries joined by
    ``+``: ``sum[:scale[:zero_point]]``, an eltwise ``relu[:alpha[:beta]]`` (any
    ``eltwise_*`` name), ``prelu[:policy]`` (f32 weights) or a binary
    ``add[:<data type>[:policy]]`` (data type one of
    :data:`POST_OP_OPERAND_TYPES`, f32 by default) with policy ``common`` (one value,
    the default), ``per_oc`` (along dim ``oc_dim``), ``per_tensor`` (dst's dims) or
    ``per_dim_<d>``."""
    import pydnnl as dnnl

    po = dnnl.post_ops()
    if not text:
        return po
    for entry in text.split("+"):
        name, *rest = entry.strip().split(":")
        name = name.lower()
        if name == "sum":
            po.append_sum(float(rest[0]) if rest else 1.0, int(rest[1]) if len(rest) > 1 else 0)
        elif name == "prelu":
            policy = rest[0].lower() if rest and rest[0] else "common"
            nd = len(dst_dims)
            masks = {"common": 0, "per_oc": 1 << oc_dim, "per_tensor": (1 << nd) - 1}
            if policy.startswith("per_dim_") and policy[8:].isdigit() and int(policy[8:]) < nd:
                masks[policy] = 1 << int(policy[8:])
            if policy not in masks:
                raise invalid_arguments(f"--attr-post-ops: {entry}: policy must be common, "
                                        f"per_oc, per_tensor or per_dim_<d> (d < {nd}), got "
                                        f"{policy}")
            po.append_prelu(masks[policy])
        elif name in _BINARY_NAMES:
            odt = rest[0].lower() if rest and rest[0] else "f32"
            if odt not in POST_OP_OPERAND_TYPES:
                raise invalid_arguments(f"--attr-post-ops: {entry}: operand data type must be "
                                        f"one of {', '.join(POST_OP_OPERAND_TYPES)}, got {odt}")
            policy = rest[1].lower() if len(rest) > 1 else "common"
            dims = [1] * len(dst_dims)
            if policy == "per_oc":
                dims[oc_dim] = dst_dims[oc_dim]
            elif policy == "per_tensor":
                dims = list(dst_dims)
            elif policy.startswith("per_dim_") and policy[8:].isdigit():
                d = int(policy[8:])
                if d >= len(dst_dims):
                    raise invalid_arguments(f"--attr-post-ops: {entry}: dst has "
                                            f"{len(dst_dims)} dims")
                dims[d] = dst_dims[d]
            elif policy != "common":
                raise invalid_arguments(f"--attr-post-ops: {entry}: policy must be common, "
                                        f"per_oc, per_tensor or per_dim_<d>, got {policy}")
            tag = "abcdefghijkl"[:len(dims)]
            po.append_binary(getattr(dnnl.algorithm, f"binary_{name}"),
                             dnnl.memory.desc(dims, getattr(dnnl.memory.data_type, odt), tag))
        else:
            alg = getattr(dnnl.algorithm, f"eltwise_{name}", None)
            if alg is None:
                raise invalid_arguments(f"--attr-post-ops: unknown entry {entry!r}: expected "
                                        f"sum, an eltwise name or a binary name")
            po.append_eltwise(alg, float(rest[0]) if rest else 0.0,
                              float(rest[1]) if len(rest) > 1 else 0.0)
    return po


def post_op_operands(po) -> dict[int, list[int]]:
    """Post-op index -> binary operand dims of ``po`` (binary entries only; prelu weights:
    :func:`post_op_arg`)."""
    return {i: list(po.get_params_binary(i)[1].dims) for i in range(po.len())
            if po.kind(i) == "binary"}


def post_op_arg(po, i: int) -> int:
    """The execute argument of post-op ``i``'s operand: a binary entry's ``src1`` or a prelu
    entry's weights."""
    from ..primitives.post_ops import binary_arg, prelu_arg

    return prelu_arg(i) if po.kind(i) == "prelu" else binary_arg(i)


def operand_entries(po) -> list[int]:
    """The indices of ``po``'s entries that read an operand (binary and prelu)."""
    return [i for i in range(po.len()) if po.kind(i) in ("binary", "prelu")]


class TorchPostOps:
    """A post-op chain as PyTorch operations on the peer's result, the same work pydnnl fuses:
    ``chain(y)`` applies ``po``'s entries in order (binary entry ``i`` reads
    ``operands[i]``, broadcast; a sum reads ``prior``). ``missing`` names an eltwise entry
    torch has no function for (the peer is then not comparable)."""

    def __init__(self, po, operands: dict[int, np.ndarray], device: str, prior=None):
        import torch

        from ..constants import algorithm
        from .eltwise import torch_eltwise

        fns = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
               "max": torch.maximum, "min": torch.minimum, "ge": torch.ge, "gt": torch.gt,
               "le": torch.le, "lt": torch.lt, "eq": torch.eq, "ne": torch.ne}
        self.steps = []
        self.missing = ""
        for i in range(po.len()):
            kind = po.kind(i)
            if kind == "sum":
                scale, zp, _ = po.get_params_sum(i)
                p = torch.from_numpy(np.asarray(prior, np.float32)).to(device)
                self.steps.append(lambda y, p=p, s=scale, z=zp: y + s * (p - z))
            elif kind == "eltwise":
                alg, alpha, beta = po.get_params_eltwise(i)
                fn = torch_eltwise(alg, alpha, beta)
                if fn is None:
                    self.missing = algorithm(alg).name
                self.steps.append(fn)
            else:
                alg, _ = po.get_params_binary(i)
                fn = fns[algorithm(alg).name.removeprefix("binary_")]
                b = torch.from_numpy(np.asarray(operands[i], np.float32)).to(device)
                self.steps.append(lambda y, f=fn, b=b: f(y, b).to(y.dtype))

    def __call__(self, y):
        for step in self.steps:
            y = step(y)
        return y


def kernel_profile(bench, reps: int = 3) -> list[tuple[str, tuple, int, float]]:
    """``(kernel, global size, launches, device ms)`` of one ``bench.run()``, slowest first,
    from a profiling stream (per group, the minimum over ``reps`` executions of its total).
    ``bench`` has ``eng``, ``stream`` (swapped for the profiling one meanwhile) and ``run``."""
    import collections

    import pydnnl as dnnl

    bench.run()
    prof = dnnl.stream(bench.eng, dnnl.stream.flags.profiling)
    best: dict = {}
    saved, bench.stream = bench.stream, prof
    try:
        for _ in range(reps):
            bench.run()
            groups = collections.defaultdict(lambda: [0, 0.0])
            for name, size, ms in prof.get_kernel_profile():
                g = groups[(name, tuple(size) if size else ())]
                g[0] += 1
                g[1] += ms
            for key, (n, ms) in groups.items():
                if key not in best or ms < best[key][1]:
                    best[key] = (n, ms)
    finally:
        bench.stream = saved
    rows = [(k[0], k[1], n, ms) for k, (n, ms) in best.items()]
    return sorted(rows, key=lambda r: -r[3])
