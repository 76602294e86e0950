"""bf16 and f16 convolutions: the data type combinations oneDNN admits, and the f32 copies
the solvers compute on.

Besides bf16/f16 data, oneDNN's implementations admit f32 data with bf16 or f16 weights
(benchdnn's ``--dt=f32:bf16:f32``, ``f32:f16:f32``) where the weights are read, in forward
and backward data propagation (its reference convolutions and deconvolutions: weights of
another type only when they are bf16/f16 and the data f32; the output and bias then f32):
the weights are converted exactly to f32 and the whole computation is f32's.

Every solver computes in f32. A bf16 or f16 tensor gets an f32 copy in the scratchpad, placed
after the solver's own regions: inputs are converted into their copies before the solver's
steps, outputs out of theirs after them (round to nearest even). Products therefore
accumulate in f32, and bias and post-ops apply in f32 before the destination's one rounding,
as oneDNN's GPU engine computes. A ``sum`` post-op reads the destination's prior content, so
a bf16/f16 destination is converted in as well as out.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...error import unimplemented
from ...kernels.reorder import ReorderProblem
from ...memory.data_types import data_type
from ...memory.desc import MemoryDesc
from ...runtime.plan import ALIGN, Plan, Ref

LOW = (data_type.bf16, data_type.f16)
FLOATS = (data_type.f32,) + LOW

# per direction (oneDNN's data type table): the descriptor whose type leads, the ones that
# must have the same type, the ones that may have the same type or f32
_RULES = {
    "fwd": ("src_desc", ("weights_desc",), ("dst_desc", "bias_desc")),
    "bwd_d": ("diff_dst_desc", ("weights_desc",), ("diff_src_desc",)),
    "bwd_w": ("src_desc", ("diff_dst_desc",), ("diff_weights_desc", "diff_bias_desc")),
}
# directions whose f32 data may read bf16/f16 weights (oneDNN's ref_convolution_fwd_t and
# ref_convolution_bwd_data_t: "src_type != wei_type implies wei_type in (f16, bf16) and
# src_type == f32"; deconvolutions run as those)
_F32_DATA_LOW_WEIGHTS = ("fwd", "bwd_d")


def check_data_types(kind: str, direction: str, descs: dict) -> None:
    """Raise :class:`unimplemented` naming the descriptor whose data type oneDNN's table
    does not pair with the others (f32 throughout, bf16/f16 data with the listed f32
    outputs and bias, or f32 data with bf16/f16 weights where they are read)."""
    lead, same, either = _RULES[direction]
    dt = descs[lead].data_type
    if dt not in FLOATS:
        raise unimplemented(f"{kind}: {lead} data type {dt.name}; implemented: f32, bf16, "
                            f"f16, and u8/s8 src for (de)convolution forward (f8 and f64 are not)")
    for name in same + either:
        md = descs.get(name)
        if md is None:
            continue
        ok = (dt,) if name in same or dt == data_type.f32 else (dt, data_type.f32)
        if (name == "weights_desc" and dt == data_type.f32
                and direction in _F32_DATA_LOW_WEIGHTS):
            ok = FLOATS
        if md.data_type not in ok:
            raise unimplemented(
                f"{kind}: {name} data type {md.data_type.name} with {lead} "
                f"{dt.name}; expected {' or '.join(t.name for t in ok)} (oneDNN's "
                f"convolution data type table)")


def is_low(md: MemoryDesc | None) -> bool:
    return md is not None and md.data_type in LOW


@dataclass(frozen=True)
class Copy:
    """One bf16/f16 argument and its f32 copy in the scratchpad."""

    role: str  # the solver's buffer name (src, wei, dst, bias)
    user: MemoryDesc  # the argument as the user stores it
    f32: MemoryDesc  # its copy: same order of dims, dense, offset0 = its first element
    load: bool  # converted into the copy before the solver runs
    store: bool  # converted out of the copy after it


@dataclass(frozen=True)
class Staging:
    """The f32 copies of a problem's bf16/f16 arguments, in scratchpad elements."""

    copies: tuple[Copy, ...]
    base: int  # first element of the copies (the solver's regions lie below)
    end: int  # scratchpad elements in all

    def roles(self) -> tuple[str, ...]:
        return tuple(c.role for c in self.copies)

    def describe(self) -> str:
        dts = sorted({c.user.data_type.name for c in self.copies})
        return f"f32 on converted {'/'.join(dts)} copies of {','.join(self.roles())}"


def user_key(role: str) -> str:
    """The plan's name of the user's bf16/f16 buffer whose copy plays ``role``."""
    return f"{role}:user"


def _dense_order(md: MemoryDesc) -> list[int]:
    """md's dims outermost first, by stride (ties: logical order)."""
    return sorted(range(len(md.dims)), key=lambda d: (-md.strides[d], d))


def f32_copy_desc(md: MemoryDesc, off: int) -> MemoryDesc:
    """A dense f32 desc of ``md``'s dims starting at element ``off``: ``md``'s format where
    it has a tag (blocked ones included), else its dims in the order of its strides."""
    if md.tag is not None:
        out = MemoryDesc(md.dims, data_type.f32, md.tag)
    elif md.inner_blks:  # a blocked view without a tag: plain row-major
        out = MemoryDesc(md.dims, data_type.f32, "abcdefghijkl"[:len(md.dims)])
    else:
        strides = [0] * len(md.dims)
        s = 1
        for d in reversed(_dense_order(md)):
            strides[d] = s
            s *= md.dims[d]
        out = MemoryDesc(md.dims, data_type.f32, strides)
    out = out.with_data_type(data_type.f32)  # a private copy whose offset may be set
    out.offset0 = int(off)
    return out


def stage(descs: dict, logical: dict, roles: dict, outputs: set, reads_dst: bool,
          base: int) -> tuple[dict, Staging]:
    """``(descs with f32 copies in place of bf16/f16 ones, Staging)`` with the copies from
    scratchpad element ``base`` on. ``logical``/``roles``: each desc name's tensor and the
    solver's buffer playing it; ``outputs``: the names written; ``reads_dst``: a sum post-op
    reads the destination's prior content."""
    out, copies, off = dict(descs), [], base
    for name, md in descs.items():
        if not is_low(md):
            continue
        off = -(-off // ALIGN) * ALIGN
        twin = f32_copy_desc(md, off)
        is_out = name in outputs
        copies.append(Copy(roles[name], md, twin,
                           load=not is_out or (reads_dst and logical[name] == "dst"),
                           store=is_out))
        out[name] = twin
        off = twin.nelems_physical()
    return out, Staging(tuple(copies), base, off)


def add_steps(plan: Plan, st: Staging) -> None:
    """Put the conversions around the solver's steps in ``plan`` (built with its scratchpad
    regions below ``st.base``) and size its scratchpad for the copies."""
    n = len(plan.steps)
    for c in st.copies:
        if c.load:
            if c.f32.nelems_physical() - c.f32.offset0 > c.f32.nelems():
                # block padding: zero, as a solver may read whole blocks
                plan.zero(Ref(c.role), c.f32.offset0,
                          c.f32.nelems_physical() - c.f32.offset0)
            plan.reorder(ReorderProblem.between(c.user, c.f32), Ref(user_key(c.role)),
                         Ref(c.role))
    loads = plan.steps[n:]
    plan.steps[n:] = []
    plan.steps[:0] = loads
    for c in st.copies:
        if c.store:
            if c.user.padded_dims != c.user.dims:  # the output's block padding holds zeros
                plan.zero(Ref(user_key(c.role)), c.user.offset0,
                          c.user.nelems_physical() - c.user.offset0,
                          itemsize=c.user.data_type.itemsize)
            plan.reorder(ReorderProblem.between(c.f32, c.user), Ref(c.role),
                         Ref(user_key(c.role)))
    plan.scratch_elems = max(plan.scratch_elems, st.end)


__all__ = ["check_data_types", "is_low", "Copy", "Staging", "user_key", "f32_copy_desc",
           "stage", "add_steps", "LOW"]
