"""What every primitive shares: descriptor queries, argument validation, execute, verbose."""
from __future__ import annotations

import time
import weakref
from dataclasses import dataclass

import numpy as np

from .. import verbose
from ..attr import primitive_attr
from ..constants import (
    ARG_ATTR_MULTIPLE_POST_OP,
    ARG_ATTR_SCALES,
    ARG_ATTR_ZERO_POINTS,
    ARG_SCRATCHPAD,
    ARG_SRC_1,
    ARG_WEIGHTS,
    ARG_WORKSPACE,
    arg_name,
    query,
    scratchpad_mode,
)
from ..engine import _cl
from ..engine import engine as _engine
from ..error import invalid_arguments
from ..memory import memory
from ..memory.desc import MemoryDesc
from ..runtime import fpmath
from ..runtime.kernel_cache import finish_pending
from ..stream import stream as _stream


@dataclass(frozen=True)
class ArgSpec:
    """One execution argument: its desc, whether the primitive writes it, whether it must come."""

    md: MemoryDesc
    output: bool
    required: bool = True


# query -> (first argument number of that family); index i adds i
_QUERY_ARGS = {
    query.src_md: (1, 2, 3, 4), query.dst_md: (17, 18, 19), query.weights_md: (33, 34, 35, 36, 41),
    query.diff_src_md: (129, 130, 131, 132), query.diff_dst_md: (145, 146, 147),
    query.diff_weights_md: (161, 162, 163, 164, 169),
}
# convolution, deconvolution, inner product and matmul: weights_md(1) is the bias, as in oneDNN
WEIGHTS_BIAS_FAMILIES = {query.weights_md: (33, 41), query.diff_weights_md: (161, 169)}


class primitive_desc_base:
    """Common queries of every primitive descriptor.

    Subclasses fill ``self._args`` (argument number -> :class:`ArgSpec`) during validation,
    and set ``self._kind``, ``self._impl`` and ``self._info``.
    """

    _kind = "primitive"
    #: ``(input, output)`` argument pairs that may share storage (oneDNN's in-place use).
    #: ``None`` leaves overlap checks to the primitive; a set makes execute reject every other
    #: argument whose bytes overlap an output's, since the kernels read inputs while writing.
    _IN_PLACE: frozenset[tuple[int, int]] | None = None
    #: this primitive's own numbering of a query family (replacing ``_QUERY_ARGS``' entry)
    _QUERY_FAMILIES: dict = {}

    def _init_base(self, eng: _engine, attr: primitive_attr | None) -> None:
        if not isinstance(eng, _engine):
            raise invalid_arguments(f"{self._kind}: engine must be a pydnnl.engine, got "
                                    f"{type(eng).__name__}")
        if attr is not None and not isinstance(attr, primitive_attr):
            raise invalid_arguments(f"{self._kind}: attr must be a primitive_attr, got "
                                    f"{type(attr).__name__}")
        self._engine = eng
        self._attr = attr if attr is not None else primitive_attr()
        self._args: dict[int, ArgSpec] = {}
        self._impl = "ref"
        self._info = ""
        self._scratchpad_md = MemoryDesc()
        self._t_create = time.perf_counter()

    def _add_runtime_attr_args(self) -> None:
        """Scales and zero points set in the attributes become required arguments."""
        from ..memory.data_types import data_type

        attr = self._attr
        for base, masks, dt, get in (
                (ARG_ATTR_SCALES, attr.scales, data_type.f32, attr.get_scales),
                (ARG_ATTR_ZERO_POINTS, attr.zero_points, data_type.s32, attr.get_zero_points)):
            for arg, mask in masks.items():
                target = self._args.get(arg)
                if target is None:
                    raise invalid_arguments(
                        f"{self._kind}: attribute scales/zero points set for {arg_name(arg)}, "
                        f"which this primitive does not take")
                _, _, host_dt, on_host = get(arg)
                if on_host:  # one value in a host-scalar memory (set_host_scale, ...)
                    self._args[base | arg] = ArgSpec(MemoryDesc.host_scalar(host_dt), False, True)
                    continue
                n = 1
                for d, v in enumerate(target.md.dims):
                    if mask >> d & 1:
                        n *= v
                if mask >> len(target.md.dims):
                    raise invalid_arguments(
                        f"{self._kind}: mask {mask} for {arg_name(arg)} names a dimension beyond "
                        f"its {len(target.md.dims)} dims")
                self._args[base | arg] = ArgSpec(MemoryDesc([n], dt, "a"), False, True)

    def _finish_scratchpad(self, nbytes: int) -> None:
        from ..memory.data_types import data_type

        if nbytes > 0:
            self._scratchpad_md = MemoryDesc([nbytes], data_type.u8, "a")
        if self._attr.get_scratchpad_mode() == scratchpad_mode.user and nbytes > 0:
            self._args[ARG_SCRATCHPAD] = ArgSpec(self._scratchpad_md, True, True)

    # -- queries --------------------------------------------------------------------------------
    def get_engine(self) -> _engine:
        return self._engine

    #: the data types of the operands this primitive's GEMMs multiply (GEMM-based pds set it)
    _gemm_input_dts: tuple = ()

    def _fpmath_mode(self):
        """The fpmath mode its plans are built under: the attribute's; under the default
        (strict) mode with bf16 (or f16) operands only, that format's: its tensor cores
        multiply such values exactly, with f32 accumulation, as oneDNN computes bf16 data."""
        from ..constants import fpmath_mode

        mode = self._attr.get_fpmath_mode()
        dts = {dt.name for dt in self._gemm_input_dts}
        if mode == fpmath_mode.strict and len(dts) == 1 and dts <= {"bf16", "f16"}:
            return fpmath_mode[dts.pop()]
        return mode

    def _gemm_math(self) -> str:
        """What this primitive's GEMMs may compute in (:meth:`_fpmath_mode`)."""
        return fpmath.gemm_math(self._fpmath_mode())

    def get_primitive_attr(self) -> primitive_attr:
        return self._attr

    def impl_info_str(self) -> str:
        return self._impl

    def query_md(self, what: query, index: int = 0) -> MemoryDesc:
        """The desc of an argument; a zero desc when the primitive has no such argument."""
        what = query(what)
        if what == query.exec_arg_md:
            spec = self._args.get(int(index))
            return spec.md if spec else MemoryDesc()
        if what == query.workspace_md:
            return self.workspace_desc()
        if what == query.scratchpad_md:
            return self.scratchpad_desc()
        family = self._query_family(what)
        if family is None or index >= len(family):
            return MemoryDesc()
        spec = self._args.get(family[index])
        return spec.md if spec else MemoryDesc()

    def _query_family(self, what: query) -> tuple[int, ...] | None:
        """The argument numbers that ``query_md(what, index)`` walks, index 0 first."""
        return self._QUERY_FAMILIES.get(what) or _QUERY_ARGS.get(what)

    def src_desc(self, index: int = 0) -> MemoryDesc:
        return self.query_md(query.src_md, index)

    def dst_desc(self, index: int = 0) -> MemoryDesc:
        return self.query_md(query.dst_md, index)

    def weights_desc(self, index: int = 0) -> MemoryDesc:
        return self.query_md(query.weights_md, index)

    def diff_src_desc(self, index: int = 0) -> MemoryDesc:
        return self.query_md(query.diff_src_md, index)

    def diff_dst_desc(self, index: int = 0) -> MemoryDesc:
        return self.query_md(query.diff_dst_md, index)

    def diff_weights_desc(self, index: int = 0) -> MemoryDesc:
        return self.query_md(query.diff_weights_md, index)

    def workspace_desc(self) -> MemoryDesc:
        spec = self._args.get(ARG_WORKSPACE)
        return spec.md if spec else MemoryDesc()

    def scratchpad_desc(self) -> MemoryDesc:
        return self._scratchpad_md

    #: names preferred in messages for this primitive's arguments (e.g. the RNN mnemonics)
    _ARG_LABELS: dict[int, str] = {}

    def _arg_label(self, arg: int) -> str:
        return self._ARG_LABELS.get(arg) or arg_name(arg)

    def _arg_engine(self, arg: int) -> _engine:
        """The engine argument ``arg`` must live on."""
        return self._engine

    def _stream_engine_ok(self, eng: _engine) -> bool:
        return eng == self._engine

    def arg_specs(self) -> dict[int, ArgSpec]:
        return dict(self._args)

    def _verbose_mds(self) -> str:
        return " ".join(f"{self._arg_label(a)[4:].lower()}:{s.md.short_str()}"
                        for a, s in self._args.items() if a < ARG_ATTR_SCALES)


def _bind_prelu_weights(args: dict) -> dict:
    """``args`` with each prelu post-op's weights (``ARG_ATTR_MULTIPLE_POST_OP(i) |
    ARG_WEIGHTS``) also bound as entry ``i``'s binary operand (``... | ARG_SRC_1``), the
    argument the fusing kernels read entry ``i``'s operand from."""
    base = ARG_ATTR_MULTIPLE_POST_OP(0)
    extra = {a - ARG_WEIGHTS + ARG_SRC_1: m for a, m in args.items()
             if a >= base and a % base == ARG_WEIGHTS}
    return {**args, **extra} if extra else args


def _args_memo(s, args: dict) -> tuple:
    """What :func:`_same_args` compares: the stream, and per argument its memory (weakly: a
    primitive must not keep its last arguments alive) and buffer generation."""
    return (weakref.ref(s), tuple((a, weakref.ref(m), m._handle_gen) for a, m in args.items()))


def _same_args(memo, s, args: dict) -> bool:
    """Whether ``s`` and ``args`` are the stream and the memories (same objects, same buffers)
    that passed the checks last time: every check depends on those alone (a memory's desc and
    engine never change; ``set_data_handle`` moves its generation on). The checks cost more
    host time than a small primitive's launch."""
    if memo is None or type(args) is not dict or memo[0]() is not s \
            or len(memo[1]) != len(args):
        return False
    for a, ref, gen in memo[1]:
        m = args.get(a)
        if m is None or ref() is not m or m._handle_gen != gen:
            return False
    return True


def _host_scalar_mismatch(kind: str, label: str, got: MemoryDesc, want: MemoryDesc) -> str:
    """The message of an execute argument that is a host scalar where a device memory is
    expected, or the other way round."""
    if want.is_host_scalar():
        return (f"{kind}.execute: argument {label} must be a host-scalar memory "
                f"(memory(memory.desc.host_scalar({want.data_type.name}), value)), as the "
                f"attribute's set_host_scale/set_host_zero_point declared; got a device memory "
                f"of {got!r}")
    return (f"{kind}.execute: argument {label} must be a device memory of {want!r}; got a host "
            f"scalar ({got!r}), which the attribute did not declare (set_host_scale / "
            f"set_host_zero_point)")


def check_in_place(kind: str, args: dict, inputs, output: int) -> None:
    """An input sharing ``output``'s buffer must have its desc (in-place use); raises
    invalid_arguments naming both arguments otherwise."""
    out = args[output]
    for a in inputs:
        m = args[a]
        if m._buffer is out._buffer and m.get_desc() != out.get_desc():
            raise invalid_arguments(
                f"{kind}.execute: {arg_name(a)} and {arg_name(output)} share one buffer with "
                f"different descs ({m.get_desc()!r} vs {out.get_desc()!r}); in-place use needs "
                f"the same desc")


class bias_queries:
    """``bias_desc()`` and ``diff_bias_desc()`` of the primitives whose weights_md(1) and
    diff_weights_md(1) are the bias (oneDNN's convolution, inner product and matmul pds);
    zero descs where the primitive has no such argument."""

    _QUERY_FAMILIES = WEIGHTS_BIAS_FAMILIES

    def bias_desc(self) -> MemoryDesc:
        return self.query_md(query.weights_md, 1)

    def diff_bias_desc(self) -> MemoryDesc:
        return self.query_md(query.diff_weights_md, 1)


def _storage_span(m: memory) -> tuple[int, int, int]:
    """(root ``cl_mem`` handle, first byte, end byte) that the elements of ``m`` can touch;
    a sub-buffer is placed inside the buffer it was cut from. Kept on ``m`` for its current
    buffer (its desc never changes; ``set_data_handle`` replaces the buffer object): the
    OpenCL queries and the desc's extent cost more per execute than a small primitive's
    launches."""
    buf = m.buffer
    got = m.__dict__.get("_span")
    if got is not None and got[0] is buf:
        return got[1]
    span = _find_span(buf, m.get_desc())
    m.__dict__["_span"] = (buf, span)
    return span


def _find_span(buf, md) -> tuple[int, int, int]:
    cl = _cl()
    base = 0
    try:
        parent = buf.get_info(cl.mem_info.ASSOCIATED_MEMOBJECT)
    except cl.Error:  # some runtimes forget a released parent although a sub-buffer lives on
        parent = None
    if parent is not None:
        base, buf = buf.get_info(cl.mem_info.OFFSET), parent
    size = md.data_type.itemsize
    return buf.int_ptr, base + md.offset0 * size, base + md.nelems_physical() * size


def _elements_overlap(a: memory, b: memory, span_a, span_b) -> bool:
    """Whether ``a`` and ``b`` share an element's bytes (their spans being known to intersect).
    Dense layouts fill their span; layouts with gaps (strides, views) may interleave, so
    those compare the exact byte sets."""
    ma, mb = a.get_desc(), b.get_desc()
    if (ma.is_dense() and mb.is_dense()) or ma.nelems() == 0 or mb.nelems() == 0:
        return ma.nelems() > 0 and mb.nelems() > 0

    def byte_set(md, span):
        size = md.data_type.itemsize
        base = span[1] - md.offset0 * size  # the byte of storage element 0
        return (base + md.element_offsets().ravel()[:, None] * size + np.arange(size)).ravel()

    return bool(np.intersect1d(byte_set(ma, span_a), byte_set(mb, span_b)).size)


def check_no_alias(pd: primitive_desc_base, args: dict) -> None:
    """Raise invalid_arguments naming both arguments when an output's storage overlaps another
    argument's, unless the pair is one of ``pd._IN_PLACE``."""
    allowed = pd._IN_PLACE or frozenset()
    outputs = [a for a, sp in pd._args.items() if sp.output and a in args]
    if not outputs:
        return
    # a host scalar has no device storage to overlap
    spans = {a: _storage_span(m) for a, m in args.items() if not m.get_desc().is_host_scalar()}
    for o in outputs:
        so = spans[o]
        for a, sa in spans.items():
            if a == o or (a, o) in allowed or (a in outputs and a > o):  # each pair once
                continue
            if sa[0] != so[0] or sa[1] >= so[2] or so[1] >= sa[2]:
                continue
            if not _elements_overlap(args[a], args[o], sa, so):
                continue
            same = "are the same memory" if args[a] is args[o] else "overlap in one buffer"
            raise invalid_arguments(
                f"{pd._kind}.execute: {pd._arg_label(a)} and {pd._arg_label(o)} {same} (bytes "
                f"[{sa[1]}, {sa[2]}) and [{so[1]}, {so[2]})); expected separate storage: "
                f"{pd._arg_label(o)} is written while {pd._arg_label(a)} is in use")


def _nested_pd(cls: type) -> type:
    """The nearest ``primitive_desc`` class of ``cls`` or its bases (primitive_desc_base for a
    primitive without one: the ``primitive_desc`` property below is no class)."""
    for c in cls.__mro__:
        want = c.__dict__.get("primitive_desc")
        if isinstance(want, type):
            return want
    return primitive_desc_base


class primitive:
    """A primitive built once from its descriptor and executed many times.

    A public primitive nests its descriptor class (``lstm_forward.primitive_desc``); the
    constructor takes only an instance of that class.
    """

    def __init__(self, pd: primitive_desc_base):
        want = type(self).__dict__.get("primitive_desc") or _nested_pd(type(self))
        if not isinstance(pd, want):
            raise invalid_arguments(f"{type(self).__name__}: expected a {want.__qualname__}, got "
                                    f"{type(pd).__qualname__}")
        self._pd = pd
        t0 = time.perf_counter()
        # the plans built here give their GEMMs the math the attribute's fpmath mode allows
        with fpmath.scope(pd._fpmath_mode()):
            self._create()
        # its kernels (its descriptor's too) compiled on the build thread while the next ones
        # were generated: creation returns with them built, or raises the first failure
        finish_pending()
        if verbose.enabled():
            verbose.line("create", pd._kind, pd._impl, pd._verbose_mds(), pd._info,
                         (time.perf_counter() - t0) * 1e3)

    def get_primitive_desc(self) -> primitive_desc_base:
        return self._pd

    @property
    def _host_scalars(self):
        """Device copies of this primitive's host-scalar arguments (made on first use)."""
        stage = self.__dict__.get("_host_scalar_stage")
        if stage is None:
            from ..runtime.host_scalars import HostScalarStage

            stage = self.__dict__.setdefault("_host_scalar_stage", HostScalarStage())
        return stage

    @property
    def primitive_desc(self) -> primitive_desc_base:
        return self._pd

    def _create(self) -> None:  # build kernels and plan
        raise NotImplementedError

    def _execute(self, s: _stream, args: dict[int, memory]) -> None:
        raise NotImplementedError

    def execute(self, s: _stream, args: dict[int, memory]) -> None:
        """Validate ``args`` (``{ARG_*: memory}``) and enqueue the work on stream ``s``."""
        if not _same_args(self.__dict__.get("_checked"), s, args):
            self._check_args(s, args)
            self.__dict__["_checked"] = _args_memo(s, args)
        host = self.__dict__.get("_host_args")
        if host is None:  # the arguments the descriptor declared host scalars (checked above)
            host = self.__dict__["_host_args"] = tuple(
                a for a, sp in self._pd._args.items() if sp.md.is_host_scalar())
            base = ARG_ATTR_MULTIPLE_POST_OP(0)
            self.__dict__["_prelu"] = any(a >= base and a % base == ARG_WEIGHTS
                                          for a in self._pd._args)
        if self.__dict__["_prelu"]:
            args = _bind_prelu_weights(args)
        if host:  # the kernels read host-scalar scales and zero points from device copies
            args = self._host_scalars.device_args(args, host, self._pd._arg_engine)
        if verbose.enabled():
            s.wait()
            t0 = time.perf_counter()
            self._execute(s, args)
            s.wait()
            verbose.line("exec", self._pd._kind, self._pd._impl, self._pd._verbose_mds(),
                         self._pd._info, (time.perf_counter() - t0) * 1e3)
        else:
            self._execute(s, args)

    def _check_args(self, s: _stream, args) -> None:
        pd, kind = self._pd, self._pd._kind
        if not isinstance(s, _stream):
            raise invalid_arguments(f"{kind}.execute: expected a pydnnl.stream, got "
                                    f"{type(s).__name__}")
        if not pd._stream_engine_ok(s.get_engine()):
            raise invalid_arguments(
                f"{kind}.execute: the stream is on {s.get_engine()!r}, the primitive on "
                f"{pd.get_engine()!r}")
        if not isinstance(args, dict):
            raise invalid_arguments(f"{kind}.execute: args must be a dict {{ARG_*: memory}}, "
                                    f"got {type(args).__name__}")
        for a, m in args.items():
            if a not in pd._args:
                known = ", ".join(pd._arg_label(k) for k in pd._args)
                raise invalid_arguments(
                    f"{kind}.execute: unexpected argument {pd._arg_label(a)}; this primitive "
                    f"takes {known}")
            if not isinstance(m, memory):
                raise invalid_arguments(
                    f"{kind}.execute: argument {pd._arg_label(a)} must be a pydnnl.memory, "
                    f"got {type(m).__name__}")
        for a, spec in pd._args.items():
            m = args.get(a)
            if m is None:
                if spec.required:
                    raise invalid_arguments(
                        f"{kind}.execute: missing argument {pd._arg_label(a)} "
                        f"(expected {spec.md!r})")
                continue
            md = m.get_desc()
            if md.is_host_scalar() != spec.md.is_host_scalar():
                raise invalid_arguments(_host_scalar_mismatch(kind, pd._arg_label(a), md, spec.md))
            if md is not spec.md and md != spec.md:
                raise invalid_arguments(
                    f"{kind}.execute: argument {pd._arg_label(a)} has desc {m.get_desc()!r}, "
                    f"the primitive expects {spec.md!r}")
            if not md.is_host_scalar() and m.get_engine() != pd._arg_engine(a):
                raise invalid_arguments(
                    f"{kind}.execute: argument {pd._arg_label(a)} lives on {m.get_engine()!r}, the "
                    f"primitive expects it on {pd._arg_engine(a)!r}")
        if pd._IN_PLACE is not None:
            check_no_alias(pd, args)
