"""Memory descriptors: logical dims, data type and physical layout (oneDNN's blocking desc).

The physical offset of the element at logical index ``x`` is

    offset0 + sum_d (x_d // B_d) * strides[d] + inner(x)

where ``B_d`` is the product of the inner block sizes of dimension d and ``inner(x)`` places the
remainders inside the innermost block, the blocks listed outermost first (oneDNN's
``inner_blks``/``inner_idxs``). Plain and strided layouts have no inner blocks. Each dimension
contributes independently, which makes every layout cheap to express in a kernel.
"""
from __future__ import annotations

import enum
import math
from typing import Sequence

import numpy as np

from ..error import invalid_arguments, unimplemented
from .data_types import as_data_type, data_type
from .format_tags import FormatTag, as_format_tag, format_tag, parse_tag

MAX_NDIMS = 12
# dims, strides and byte offsets are int64 in oneDNN (dnnl_dim_t) and in the kernels' offsets
INT64_MAX = 2**63 - 1


class format_kind(enum.IntEnum):
    """What kind of layout a descriptor holds (``dnnl_format_kind_t``)."""

    undef = 0
    any = 1
    blocked = 2
    #: one value held on the host (``memory.desc.host_scalar(dt)``): a scale or zero point
    #: passed at execute without a device buffer (oneDNN's value 5; 3 and 4, opaque and
    #: sparse, do not exist here)
    host_scalar = 5


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def _dims_tuple(dims, what: str = "dims") -> tuple[int, ...]:
    try:
        t = tuple(dims)
    except TypeError:
        raise invalid_arguments(f"{what}: expected a sequence of ints, got {dims!r}") from None
    for v in t:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise invalid_arguments(f"{what}: expected a sequence of ints, got {dims!r}")
    return tuple(int(v) for v in t)


class MemoryDesc:
    """``memory.desc(dims, data_type, format_tag_or_strides, allow_empty=False)``.

    ``memory.desc()`` with no arguments is the zero descriptor (``is_zero()``), used for absent
    optional tensors.
    """

    __slots__ = ("dims", "data_type", "format_kind", "strides", "inner_blks", "inner_idxs",
                 "padded_dims", "offset0", "tag")

    def __init__(self, dims=None, data_type=None, format_tag_or_strides=None,
                 allow_empty: bool = False):
        if dims is None:
            if data_type is not None or format_tag_or_strides is not None:
                raise invalid_arguments(
                    "memory.desc: dims: expected a sequence of non-negative ints, got None "
                    f"(with data_type={data_type!r}, format_tag_or_strides="
                    f"{format_tag_or_strides!r}); memory.desc() with no arguments is the zero "
                    "desc")
            self._init_zero()
            return
        dims = _dims_tuple(dims, "memory.desc: dims")
        if data_type is None or format_tag_or_strides is None:
            raise invalid_arguments(
                "memory.desc: expected (dims, data_type, format_tag_or_strides), got "
                f"data_type={data_type!r}, format_tag_or_strides={format_tag_or_strides!r}")
        dt = as_data_type(data_type)
        if dt == dt.undef:
            raise invalid_arguments("memory.desc: data_type undef cannot describe a memory")
        if not 1 <= len(dims) <= MAX_NDIMS:
            raise invalid_arguments(
                f"memory.desc: expected 1 to {MAX_NDIMS} dims, got {len(dims)} ({list(dims)})")
        for i, v in enumerate(dims):
            if v < 0 or (v == 0 and not allow_empty):
                raise invalid_arguments(
                    f"memory.desc: dims[{i}] must be positive, got {v} in dims {list(dims)}"
                    + ("" if v < 0 else " (pass allow_empty=True for an empty tensor)"))
            if v > INT64_MAX:
                raise invalid_arguments(
                    f"memory.desc: dims[{i}] must be at most {INT64_MAX} (int64), got {v} in "
                    f"dims {list(dims)}")
        self.dims = dims
        self.data_type = dt
        self.offset0 = 0
        if isinstance(format_tag_or_strides, (FormatTag, str)):
            self._init_tag(as_format_tag(format_tag_or_strides))
        else:
            self._init_strides(_dims_tuple(format_tag_or_strides, "memory.desc: strides"))
        self._check_size()

    # -- construction --------------------------------------------------------------------------
    def _init_zero(self) -> None:
        self.dims = ()
        self.data_type = data_type.undef
        self.format_kind = format_kind.undef
        self.strides = ()
        self.inner_blks = ()
        self.inner_idxs = ()
        self.padded_dims = ()
        self.offset0 = 0
        self.tag = format_tag.undef

    def _init_tag(self, tag: FormatTag) -> None:
        self.tag = tag
        if tag.name == "any":
            self.format_kind = format_kind.any
            self.strides, self.inner_blks, self.inner_idxs = (), (), ()
            self.padded_dims = self.dims
            return
        if tag.canonical is None:
            raise invalid_arguments(f"memory.desc: format tag {tag.name!r} describes no layout")
        outer, blocks = parse_tag(tag)
        if len(outer) != len(self.dims):
            raise invalid_arguments(
                f"memory.desc: format tag {tag.name!r} is for {len(outer)} dims, but dims "
                f"{list(self.dims)} have {len(self.dims)}")
        self.format_kind = format_kind.blocked
        self.inner_blks = tuple(b for b, _ in blocks)
        self.inner_idxs = tuple(d for _, d in blocks)
        blk = self.block_sizes()
        self.padded_dims = tuple(_round_up(v, b) for v, b in zip(self.dims, blk))
        strides = [0] * len(self.dims)
        running = int(np.prod(self.inner_blks)) if self.inner_blks else 1
        for d in reversed(outer):
            strides[d] = running
            running *= max(self.padded_dims[d] // blk[d], 1)
        self.strides = tuple(strides)

    def _init_strides(self, strides: tuple[int, ...]) -> None:
        if len(strides) != len(self.dims):
            raise invalid_arguments(
                f"memory.desc: strides {list(strides)} have {len(strides)} entries, dims "
                f"{list(self.dims)} have {len(self.dims)}")
        if any(s < 0 for s in strides):
            raise invalid_arguments(
                f"memory.desc: strides must be non-negative, got {list(strides)}")
        self.tag = None
        self.format_kind = format_kind.blocked
        self.strides = strides
        self.inner_blks, self.inner_idxs = (), ()
        self.padded_dims = self.dims
        # two elements must never share storage
        order = sorted((s, v) for s, v in zip(strides, self.dims) if v > 1)
        extent = 1
        for s, v in order:
            if s < extent:
                raise invalid_arguments(
                    f"memory.desc: strides {list(strides)} make elements of dims "
                    f"{list(self.dims)} overlap")
            extent = s * v

    def _check_size(self) -> None:
        """Reject descs whose element count or byte size does not fit an int64 offset."""
        itemsize = self.data_type.itemsize
        # exact integer arithmetic: numpy's int64 products would wrap around silently
        nbytes = math.prod(self.dims) * itemsize
        if self.format_kind == format_kind.blocked and all(v > 0 for v in self.dims):
            blk = self.block_sizes()
            extent = sum((p // b - 1) * s for p, b, s in zip(self.padded_dims, blk, self.strides))
            inner = math.prod(self.inner_blks)
            nbytes = max(nbytes, (self.offset0 + extent + inner) * itemsize)
        if nbytes > INT64_MAX or max(self.strides, default=0) > INT64_MAX:
            layout = ("" if self.tag is not None else f" with strides {list(self.strides)}")
            raise invalid_arguments(
                f"memory.desc: dims {list(self.dims)}{layout} of {self.data_type.name} need "
                f"{nbytes} bytes; expected at most {INT64_MAX} (an int64 byte offset)")

    @classmethod
    def host_scalar(cls, data_type) -> "MemoryDesc":
        """The desc of one value of ``data_type`` that lives on the host
        (``dnnl::memory::desc::host_scalar``): one dim of size 1, format kind ``host_scalar``,
        no layout; ``get_size()`` is the type's size. A memory made from it
        (``memory(desc, value)``) is passed at execute as a scale or zero point set with
        ``primitive_attr.set_host_scale`` / ``set_host_zero_point``."""
        dt = as_data_type(data_type)
        if dt == dt.undef:
            raise invalid_arguments("memory.desc.host_scalar: data_type undef cannot describe "
                                    "a value")
        md = cls.__new__(cls)
        md.dims, md.data_type, md.format_kind = (1,), dt, format_kind.host_scalar
        md.strides, md.inner_blks, md.inner_idxs = (), (), ()
        md.padded_dims, md.offset0, md.tag = (1,), 0, None
        return md

    @classmethod
    def _make(cls, dims, dt, strides, inner_blks, inner_idxs, padded_dims, offset0, tag):
        md = cls.__new__(cls)
        md.dims, md.data_type, md.format_kind = tuple(dims), dt, format_kind.blocked
        md.strides, md.inner_blks, md.inner_idxs = (tuple(strides), tuple(inner_blks),
                                                    tuple(inner_idxs))
        md.padded_dims, md.offset0, md.tag = tuple(padded_dims), offset0, tag
        return md

    # -- queries (oneDNN names) -----------------------------------------------------------------
    def get_dims(self) -> list[int]:
        return list(self.dims)

    def get_ndims(self) -> int:
        return len(self.dims)

    def get_data_type(self) -> data_type:
        return self.data_type

    def get_format_kind(self) -> format_kind:
        return self.format_kind

    def get_strides(self) -> list[int]:
        return list(self.strides)

    def get_inner_blks(self) -> list[int]:
        return list(self.inner_blks)

    def get_inner_idxs(self) -> list[int]:
        return list(self.inner_idxs)

    def get_padded_dims(self) -> list[int]:
        return list(self.padded_dims)

    def get_offset0(self) -> int:
        return self.offset0

    def is_zero(self) -> bool:
        return self.format_kind == format_kind.undef and not self.dims

    def is_any(self) -> bool:
        return self.format_kind == format_kind.any

    def is_host_scalar(self) -> bool:
        """Whether this is a host scalar's desc (:meth:`host_scalar`)."""
        return self.format_kind == format_kind.host_scalar

    def get_size(self) -> int:
        """Bytes needed to hold the tensor in this layout, padding (and offset0) included."""
        if self.format_kind == format_kind.host_scalar:
            return self.data_type.itemsize
        return self.nelems_physical() * self.data_type.itemsize

    def nelems(self) -> int:
        return int(np.prod(self.dims)) if self.dims else 0

    def nelems_physical(self) -> int:
        """Number of storage elements spanned, from the buffer start to the last element."""
        if self.format_kind != format_kind.blocked or any(v == 0 for v in self.dims):
            return 0
        blk = self.block_sizes()
        extent = sum((p // b - 1) * s for p, b, s in zip(self.padded_dims, blk, self.strides))
        inner = int(np.prod(self.inner_blks)) if self.inner_blks else 1
        return self.offset0 + extent + inner

    def block_sizes(self) -> list[int]:
        """Total inner block size of every dimension (1 where not blocked)."""
        blk = [1] * len(self.dims)
        for b, d in zip(self.inner_blks, self.inner_idxs):
            blk[d] *= b
        return blk

    def is_plain(self) -> bool:
        return self.format_kind == format_kind.blocked and not self.inner_blks

    def is_dense(self) -> bool:
        """True when the storage holds the elements (and block padding) with no gaps."""
        if self.format_kind != format_kind.blocked:
            return False
        return self.nelems_physical() - self.offset0 == int(np.prod(self.padded_dims))

    def format_name(self) -> str:
        """The tag name when built from a tag, else a oneDNN-like description of the strides."""
        if self.is_zero():
            return "undef"
        if self.is_host_scalar():
            return "host_scalar"
        if self.tag is not None:
            return self.tag.name
        return "strides:" + "x".join(str(s) for s in self.strides)

    # -- layout math -----------------------------------------------------------------------------
    def dim_offsets(self, d: int, x: np.ndarray) -> np.ndarray:
        """Storage-offset contribution of index values ``x`` along dimension ``d``."""
        x = np.asarray(x, dtype=np.int64)
        blk = self.block_sizes()
        off = (x // blk[d]) * self.strides[d]
        inner_strides = self._inner_strides()
        rem_blk = blk[d]
        for k, (b, idx) in enumerate(zip(self.inner_blks, self.inner_idxs)):
            if idx != d:
                continue
            sub = (x % rem_blk) // (rem_blk // b)
            off = off + sub * inner_strides[k]
            rem_blk //= b
        return off

    def _inner_strides(self) -> list[int]:
        s, out = 1, [0] * len(self.inner_blks)
        for k in range(len(self.inner_blks) - 1, -1, -1):
            out[k] = s
            s *= self.inner_blks[k]
        return out

    def inner_terms(self, d: int) -> list[tuple[int, int, int]]:
        """``(modulus, divisor, stride)`` for each inner block of dim d: term = (x % m) // q * s."""
        blk = self.block_sizes()[d]
        out, rem = [], blk
        for b, idx, s in zip(self.inner_blks, self.inner_idxs, self._inner_strides()):
            if idx == d:
                out.append((rem, rem // b, s))
                rem //= b
        return out

    def element_offsets(self) -> np.ndarray:
        """int64 array of shape ``dims``: the storage offset of every logical element."""
        self._require_concrete("element_offsets")
        nd = len(self.dims)
        total = np.full(self.dims, self.offset0, dtype=np.int64)
        for d in range(nd):
            shape = [1] * nd
            shape[d] = self.dims[d]
            total = total + self.dim_offsets(d, np.arange(self.dims[d])).reshape(shape)
        return total

    def _dense_order(self) -> list[int] | None:
        """The dims from outermost to innermost where the layout is a dense permutation of
        them (plain, no offset, no gaps), else None: its storage is then the logical array
        transposed, with no per-element offsets to compute."""
        if not self.is_plain() or self.offset0 or not self.dims or not self.is_dense():
            return None
        order = sorted(range(len(self.dims)), key=lambda d: -self.strides[d])
        run = 1
        for d in reversed(order):
            if self.dims[d] > 1 and self.strides[d] != run:
                return None
            run *= self.dims[d]
        return order

    def pack(self, values: np.ndarray) -> np.ndarray:
        """Lay out a logical array (storage dtype) in this layout; padding is zero."""
        order = self._dense_order()
        if order is not None:  # a transposed copy (a scatter per element cost ms per MB)
            arr = np.asarray(values, dtype=self.data_type.storage_dtype)
            arr = (arr.reshape(self.dims) if arr.size == self.nelems()
                   else np.broadcast_to(arr, self.dims))
            return np.ascontiguousarray(arr.transpose(order)).reshape(-1)
        flat = np.zeros(self.nelems_physical(), dtype=self.data_type.storage_dtype)
        flat[self.element_offsets()] = values
        return flat

    def unpack(self, flat: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`pack`: the logical array (storage dtype) read from ``flat``."""
        order = self._dense_order()
        if order is not None and flat.size == self.nelems():
            inverse = np.argsort(order)
            return np.ascontiguousarray(
                flat.reshape([self.dims[d] for d in order]).transpose(inverse))
        return flat[self.element_offsets()]

    def _require_concrete(self, what: str) -> None:
        if self.format_kind == format_kind.any:
            raise invalid_arguments(
                f"{what}: the memory desc has format_tag.any; query the primitive descriptor for "
                f"the layout it chose")
        if self.format_kind == format_kind.undef:
            raise invalid_arguments(f"{what}: the memory desc is the zero desc")
        if self.format_kind == format_kind.host_scalar:
            raise invalid_arguments(
                f"{what}: the memory desc describes a host scalar, which has no device layout")

    # -- transformations ---------------------------------------------------------------------------
    def reshape(self, dims, allow_empty: bool = False) -> "MemoryDesc":
        """Same storage, new dims (splitting or merging dims that are adjacent in storage)."""
        dims = _dims_tuple(dims)
        self._require_concrete("reshape")
        if int(np.prod(dims)) != self.nelems():
            raise invalid_arguments(
                f"reshape: dims {list(dims)} hold {int(np.prod(dims))} elements, the desc's dims "
                f"{list(self.dims)} hold {self.nelems()}")
        if self.inner_blks:
            raise unimplemented(f"reshape: blocked layout {self.format_name()} cannot be reshaped")
        strides = _nocopy_reshape_strides(self.dims, self.strides, dims)
        if strides is None:
            raise invalid_arguments(
                f"reshape: dims {list(self.dims)} with strides {list(self.strides)} cannot be "
                f"viewed as dims {list(dims)} without a copy")
        md = MemoryDesc(dims, self.data_type, strides, allow_empty=allow_empty)
        md.offset0 = self.offset0
        return md

    def permute_axes(self, permutation: Sequence[int], allow_empty: bool = False) -> "MemoryDesc":
        """Relabel axes: axis i becomes axis ``permutation[i]``; the storage is unchanged."""
        perm = _dims_tuple(permutation, "permutation")
        self._require_concrete("permute_axes")
        nd = len(self.dims)
        if sorted(perm) != list(range(nd)):
            raise invalid_arguments(
                f"permute_axes: permutation {list(perm)} is not a permutation of 0..{nd - 1}")
        dims, strides, padded = [0] * nd, [0] * nd, [0] * nd
        for i, p in enumerate(perm):
            dims[p], strides[p], padded[p] = self.dims[i], self.strides[i], self.padded_dims[i]
        idxs = [perm[i] for i in self.inner_idxs]
        return MemoryDesc._make(dims, self.data_type, strides, self.inner_blks, idxs, padded,
                                self.offset0, None)

    def submemory_desc(self, dims, offsets, allow_empty: bool = False) -> "MemoryDesc":
        """A region of ``dims`` starting at logical ``offsets``, inside this desc's storage."""
        dims, offsets = _dims_tuple(dims), _dims_tuple(offsets, "offsets")
        self._require_concrete("submemory_desc")
        nd = len(self.dims)
        if len(dims) != nd or len(offsets) != nd:
            raise invalid_arguments(
                f"submemory_desc: dims {list(dims)} and offsets {list(offsets)} must both have "
                f"{nd} entries")
        blk = self.block_sizes()
        for d in range(nd):
            if dims[d] < 0 or offsets[d] < 0 or dims[d] + offsets[d] > self.dims[d]:
                raise invalid_arguments(
                    f"submemory_desc: region dims {list(dims)} at offsets {list(offsets)} does not "
                    f"fit in dims {list(self.dims)} (dimension {d})")
            if blk[d] > 1 and (offsets[d] % blk[d] or (dims[d] % blk[d] and
                                                         dims[d] + offsets[d] != self.dims[d])):
                raise invalid_arguments(
                    f"submemory_desc: dimension {d} is blocked by {blk[d]}; its offset "
                    f"{offsets[d]} and size {dims[d]} must be multiples of the block")
        off = self.offset0 + sum(int(self.dim_offsets(d, np.array(offsets[d]))) for d in range(nd))
        padded = [_round_up(v, b) for v, b in zip(dims, blk)]
        return MemoryDesc._make(dims, self.data_type, self.strides, self.inner_blks,
                                self.inner_idxs, padded, off, None)

    def with_data_type(self, dt) -> "MemoryDesc":
        """Same layout, another data type."""
        md = self.__class__.__new__(self.__class__)
        for k in self.__slots__:
            setattr(md, k, getattr(self, k))
        md.data_type = as_data_type(dt)
        return md

    # -- comparison ------------------------------------------------------------------------------
    def _layout_key(self):
        if self.format_kind != format_kind.blocked:
            return (self.format_kind, self.dims, self.data_type)
        # a dimension of size 1 has no physical stride
        strides = tuple(s if p > 1 else 0 for s, p in zip(self.strides, self.padded_dims))
        return (self.format_kind, self.dims, self.data_type, strides, self.inner_blks,
                self.inner_idxs, self.padded_dims, self.offset0)

    def __eq__(self, other) -> bool:
        return isinstance(other, MemoryDesc) and self._layout_key() == other._layout_key()

    def __hash__(self) -> int:
        return hash(self._layout_key())

    def __repr__(self) -> str:
        if self.is_zero():
            return "memory.desc()"
        if self.is_host_scalar():
            return f"memory.desc.host_scalar({self.data_type.name})"
        return (f"memory.desc({list(self.dims)}, {self.data_type.name}, {self.format_name()})")

    def short_str(self) -> str:
        """``f32:tnc:50x64x512``: data type, layout, dims (as in verbose output)."""
        if self.is_zero():
            return "undef"
        return f"{self.data_type.name}:{self.format_name()}:{'x'.join(map(str, self.dims))}"


def _nocopy_reshape_strides(old_dims, old_strides, new_dims):
    """Strides that view ``old`` as ``new_dims`` without moving data, or None (numpy's rule)."""
    od = [(d, s) for d, s in zip(old_dims, old_strides) if d != 1]
    nd_nonunit = [d for d in new_dims if d != 1]
    new_strides_nonunit: list[int] = []
    oi = ni = 0
    while oi < len(od) and ni < len(nd_nonunit):
        op, np_ = od[oi][0], nd_nonunit[ni]
        oj, nj = oi + 1, ni + 1
        while op != np_:
            if np_ < op:
                np_ *= nd_nonunit[nj]
                nj += 1
            else:
                op *= od[oj][0]
                oj += 1
        for k in range(oi, oj - 1):  # the merged old dims must be contiguous with each other
            if od[k][1] != od[k + 1][0] * od[k + 1][1]:
                return None
        stride = od[oj - 1][1]
        group = []
        for k in range(nj - 1, ni - 1, -1):
            group.append(stride)
            stride *= nd_nonunit[k]
        new_strides_nonunit.extend(reversed(group))
        oi, ni = oj, nj
    out, it = [], iter(new_strides_nonunit)
    last = 1
    for d in new_dims:
        if d == 1:
            out.append(last)
        else:
            last = next(it)
            out.append(last)
    return out
