"""The one execution plan every primitive runs on: ordered steps over named buffers.

A plan is built once, when its primitive is created: kernels are generated and compiled,
GEMM parameters tuned, scratchpad regions placed. Buffers a step reads or writes are named by
:class:`Ref` (a key: an ``ARG_*`` number, a role such as ``"src"``, ``"scratch"``) and bound
at execution from the argument map. Executing only enqueues: the first run binds every step
once (:class:`~pydnnl.runtime.kernel.BoundKernel`), later runs set the buffers that changed and
launch, each step waiting for the one before on out-of-order queues.
"""
from __future__ import annotations

import re
import threading
from dataclasses import replace

import numpy as np

from ..constants import ARG_ATTR_MULTIPLE_POST_OP, ARG_SCRATCHPAD, ARG_SRC_1
from ..engine import _cl
from ..kernels.reorder import ReorderProblem, build_reorder, contiguous_copy, runtime_form
from . import fpmath
from .gemm import Gemm, GemmShape, batch_sizes, choose_params, gemm_kernel, get_gemm, splitk_reduce
from .kernel_cache import get_kernel


class Ref:
    """A buffer (or a per-execution scalar) named in a plan, bound at execute time."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def __repr__(self) -> str:
        return f"Ref({self.key!r})"


_POST_OP_SRC1 = re.compile(r"po(\d+)_src1")  # kernels' names of binary post-op operands
SCRATCH = Ref("scratch")  # the primitive's scratchpad (the user's or the plan's own)
INDEX = Ref("idx")  # the plan's int32 index table, uploaded at creation
# the plan's own GEMM workspace: tiles of k shares and the blocks' arrival counters (zeroed
# once; every launch leaves its counters zero), see Plan.gemm
GEMM_WS = Ref("gemm_ws")
ALIGN = 16  # scratch regions start at multiples of 16 elements (64 bytes)
# widest B panel a tuned GEMM may ask for (4 x 16 lanes on 16-wide SIMD): dry plans, which
# know no tuning parameters, reserve packed B for this width so the real plan always fits
MAX_PANEL = 64


# -- steps: each binds once (``bind`` -> objects with ``launch(stream, bufs, wait_for)``) --------
class _Launch:
    """A compiled kernel with arguments in its order; ``rows`` limits axis 1 of the grid to
    that many work-group rows (the sequences still running at an RNN time step)."""

    __slots__ = ("kernel", "args", "rows")
    name = property(lambda self: self.kernel.name)

    def __init__(self, kernel, args, rows=None):
        self.kernel, self.args, self.rows = kernel, tuple(args), rows

    def bind(self, plan):
        b = self.kernel.bound(self.args)
        if self.rows is not None:
            gs = list(b.gsize)
            gs[1] = min(gs[1], self.rows * (b.lsize[1] if len(b.lsize) > 1 else 1))
            b.gsize = tuple(gs)
        return [b]


def _epilogue_refs(kernel, given: dict) -> dict:
    """``given`` plus the post-op operands a kernel reads (``po<i>_src1``), bound by
    convention to their execute arguments ``ARG_ATTR_MULTIPLE_POST_OP(i) | ARG_SRC_1``."""
    out = dict(given)
    for n in kernel.src.arg_names:
        m = _POST_OP_SRC1.fullmatch(n)
        if m is not None and n not in out:
            out[n] = Ref(ARG_ATTR_MULTIPLE_POST_OP(int(m.group(1))) | ARG_SRC_1)
    return out


class _GemmStep:
    """One call of a tuned GEMM launcher (two launches when it splits k); ``extra`` names
    the operands of a fused epilogue by kernel argument (``bias``, ``src_scale``, ...; the
    post-ops' operands are added by :func:`_epilogue_refs`)."""

    __slots__ = ("gemm", "args", "rows", "extra")
    name = "gemm"

    def __init__(self, gemm: Gemm, args, rows=None, extra=None, ws_off: int | None = None):
        self.gemm, self.args, self.rows = gemm, tuple(args), rows
        self.extra = _epilogue_refs(gemm.kernel, extra or {})
        if ws_off is not None:  # blocks sharing k: their tiles and counters
            self.extra.update(ws=GEMM_WS, ws_off=np.int64(ws_off),
                              cnt_off=np.int64(ws_off + gemm.ws_counters))

    def bind(self, plan):
        g, args = self.gemm, self.args
        if self.rows is not None:
            b = g.kernel.bound(g.ordered(*args, extra=self.extra))
            b.gsize = g.global_size_for_rows(self.rows)
            return [b]
        if g.splits > 1:
            args = args + (SCRATCH, plan.splitk_off)
        return g.bound(args, self.extra)


class _Fill:
    """Zeros over ``nbytes`` bytes of a buffer from ``offset`` bytes."""

    __slots__ = ("ref", "offset", "nbytes", "name")

    def __init__(self, ref: Ref, offset: int, nbytes: int, name: str = "zero"):
        self.ref, self.offset, self.nbytes, self.name = ref, offset, nbytes, name

    def bind(self, plan):
        return [self]

    def launch(self, stream, bufs, wait_for=None):
        # a float pattern fills 4 bytes at a time; spans of other data types go byte-wise
        word = self.offset % 4 == 0 and self.nbytes % 4 == 0
        evt = _cl().enqueue_fill_buffer(stream.queue, bufs[self.ref.key],
                                        np.float32(0) if word else np.uint8(0),
                                        self.offset, self.nbytes, wait_for=wait_for)
        stream.record(self.name, evt)
        return evt


class _Copy:
    """``nbytes`` bytes from ``src_offset`` of one buffer to ``dst_offset`` of another (a
    reorder between equal dense layouts: no kernel, any size)."""

    __slots__ = ("src", "dst", "src_offset", "dst_offset", "nbytes")
    name = "copy"

    def __init__(self, src: Ref, dst: Ref, src_offset: int, dst_offset: int, nbytes: int):
        self.src, self.dst = src, dst
        self.src_offset, self.dst_offset, self.nbytes = src_offset, dst_offset, nbytes

    def bind(self, plan):
        return [self]

    def launch(self, stream, bufs, wait_for=None):
        src, dst = bufs[self.src.key], bufs[self.dst.key]
        if src.int_ptr == dst.int_ptr and self.src_offset == self.dst_offset:
            # one memory given as both (a user's reorder in place): nothing moves, and
            # OpenCL refuses an overlapping copy
            evt = _cl().enqueue_marker(stream.queue, wait_for=wait_for)
        else:
            evt = _cl().enqueue_copy(stream.queue, dst, src, byte_count=self.nbytes,
                                     src_offset=self.src_offset, dst_offset=self.dst_offset,
                                     wait_for=wait_for)
        stream.record(self.name, evt)
        return evt


class Bind:
    """A memory of the execute-time arguments seen through ``md`` (a primitive step's
    argument): ``bufs[key]`` is a ``pydnnl.memory``, an object with a ``buffer``, or a
    buffer."""

    __slots__ = ("key", "md")

    def __init__(self, key, md):
        self.key, self.md = key, md


class _PrimitiveStep:
    """Another primitive executed with arguments bound at execution (translation layers such
    as MIOpen's and MXNet's, whose plans are made of pydnnl primitives)."""

    __slots__ = ("prim", "args", "engine")
    name = property(lambda self: self.prim.get_primitive_desc()._kind)

    def __init__(self, prim, args: dict, engine):
        self.prim, self.args, self.engine = prim, dict(args), engine

    def bind(self, plan):
        return [self]

    def launch(self, stream, bufs, wait_for=None):
        from ..memory import memory

        a = {}
        for arg, v in self.args.items():
            if isinstance(v, Bind):
                m = bufs[v.key]
                if isinstance(m, memory) and m.get_desc() == v.md:
                    v = m
                else:
                    v = memory(v.md, self.engine, getattr(m, "buffer", m))
            a[arg] = v
        self.prim.execute(stream, a)
        return None


class _Dry:
    """A step recorded by a dry plan (sizes only: nothing generated or compiled)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


class Plan:
    """Ordered steps of one primitive over buffers bound at execution.

    ``name`` and ``params`` say what built the plan (a convolution solver and its tuning
    parameters, an RNN direction); ``dry`` plans record steps and scratchpad sizes without
    generating or compiling any kernel (workspace queries). ``scratch_elems`` reserves that
    many float32 elements of scratchpad ahead of :meth:`alloc` (regions placed by the caller).
    """

    def __init__(self, engine, name: str = "", params: dict | None = None, dry: bool = False,
                 scratch_elems: int = 0):
        self.engine = engine
        self.name = name
        self.params = dict(params or {})
        self.dry = dry
        self.steps: list = []
        self.scratch_elems = int(scratch_elems)
        self.splitk_off = None
        self.ws_elems = 0  # the plan's own GEMM workspace (GEMM_WS), in floats
        self._gemm_ws: dict = {}  # id(launcher) -> its workspace offset
        self._ws_mem = None
        self._slots: dict[str, tuple[int, int]] = {}
        self._index: list[np.ndarray] = []
        self._index_len = 0
        self._index_mem = None
        self._scratch_mem = None
        self._bound: list | None = None
        self._lock = threading.Lock()
        # what the plan's GEMMs may compute in, from the fpmath mode in force at creation
        self.math = fpmath.gemm_math()

    # -- scratchpad --------------------------------------------------------------------------------
    def alloc(self, nelems: int, slot: str | None = None) -> int:
        """Offset of ``nelems`` float32 elements of scratchpad. Calls with the same ``slot``
        share one region (later ones must not need more)."""
        if slot is not None and slot in self._slots:
            off, have = self._slots[slot]
            if nelems > have:
                raise ValueError(f"plan: scratch slot {slot!r} holds {have} elements, "
                                 f"{nelems} asked")
            return off
        off = -(-self.scratch_elems // ALIGN) * ALIGN
        self.scratch_elems = off + int(nelems)
        if slot is not None:
            self._slots[slot] = (off, int(nelems))
        return off

    @property
    def scratch_bytes(self) -> int:
        return self.scratch_elems * 4

    def index(self, values) -> int:
        """Offset of ``values`` in the plan's int32 index table (:data:`INDEX`), which is
        uploaded once, at the first execution."""
        values = np.asarray(values, np.int32).ravel()
        off = self._index_len
        self._index.append(values)
        self._index_len += values.size
        return off

    # -- steps -------------------------------------------------------------------------------------
    def get(self, family: str, problem, build):
        """The compiled kernel ``(family, problem)``, generated by ``build(problem)`` on a miss."""
        return get_kernel(self.engine, family, problem, lambda: build(problem))

    def launch(self, kernel, args=None, rows: int | None = None, **named) -> None:
        """Add a launch of a compiled kernel: ``args`` in its order, or ``named`` by its
        argument names (numbers become the parameter's type); ``rows`` as in :class:`_Launch`."""
        if named:
            named = _epilogue_refs(kernel, named)  # fused binary post-ops' operands
            args = []
            for n, typ in zip(kernel.src.arg_names, kernel.scalar_types):
                if n not in named:
                    raise KeyError(f"{kernel.name}: kernel argument {n!r} not bound by the plan")
                v = named[n]
                args.append(typ(v) if typ is not None and not isinstance(v, Ref) else v)
        self.steps.append(_Launch(kernel, args, rows))

    def kernel(self, family: str, problem, build, **named) -> None:
        """Add a launch of the generated kernel ``(family, problem)``; ``named`` maps its
        argument names to :class:`Ref` buffers or ints."""
        if self.dry:
            self.steps.append(_Dry(family))
            return
        self.launch(self.get(family, problem, build), **named)

    @staticmethod
    def _operands(bias: Ref | None, epilogue: dict | None) -> dict:
        """The epilogue operands of a GEMM step by kernel argument name: ``epilogue`` with
        ``bias`` as ``"bias"``."""
        out = dict(epilogue or {})
        if bias is not None:
            if "bias" in out:
                raise ValueError("plan: a GEMM's bias given both as bias and in epilogue")
            out["bias"] = bias
        return out

    def _math(self, shape: GemmShape) -> GemmShape:
        return shape if shape.math is not None else replace(shape, math=self.math)

    def gemm_launcher(self, shape: GemmShape, static_b: bool = False,
                      split: bool = False) -> Gemm:
        """The tuned GEMM launcher for ``shape`` (see :func:`~pydnnl.runtime.gemm.get_gemm`).
        Launchers that split k share one region for their partial products: ``splitk_off``,
        allocated here unless the caller placed it (as large as the largest split's
        ``part_elems``)."""
        g = get_gemm(self.engine, self._math(shape), static_b=static_b, split=split)
        if g.splits > 1 and self.splitk_off is None:
            self.splitk_off = self.alloc(g.part_elems, slot="splitk")
        return g

    def gemm(self, g, a, a_off, b, b_off, c, c_off, packed: bool = False,
             rows: int | None = None, bias: Ref | None = None,
             epilogue: dict | None = None, slices: bool = False) -> None:
        """Add ``C = op(A) @ op(B) + beta * C``; ``g`` is a :class:`GemmShape` (``packed``: B
        was placed by :meth:`pack_b`) or a launcher from :meth:`gemm_launcher`. ``rows``
        computes only C's first rows (whole row groups). A shape with an epilogue reads its
        bias from ``bias``, the other operands the caller binds from ``epilogue`` (kernel
        argument name -> :class:`Ref`, e.g. the scales: ``{"src_scale": Ref(...)}``) and its
        post-ops' operands from their execute arguments. ``slices``: the kernel's blocks may
        share k among work-groups (a C of few blocks with a long k); their tiles and arrival
        counters then live in the plan's own GEMM workspace, outside the scratchpad, since
        the counters must stay zero between executions (so one primitive must not run on two
        queues at once, as with its own scratchpad)."""
        if self.dry:
            self.steps.append(_Dry("gemm"))
            return
        if isinstance(g, GemmShape):
            g = get_gemm(self.engine, self._math(g), static_b=packed, slices=slices)
        ws_off = None
        if g.ws_elems:
            if rows is not None:
                raise ValueError("Plan.gemm: a GEMM whose blocks share k runs whole (rows)")
            # calls of one launcher share its workspace: the plan's launches run one after
            # the other, and each leaves the counters at zero (an RNN's steps: one region,
            # not one per step)
            ws_off = self._gemm_ws.get(id(g))
            if ws_off is None:
                ws_off = self._gemm_ws[id(g)] = -(-self.ws_elems // ALIGN) * ALIGN
                self.ws_elems = ws_off + g.ws_elems
        self.steps.append(_GemmStep(g, (a, int(a_off), b, int(b_off), c, int(c_off)), rows,
                                    self._operands(bias, epilogue), ws_off))

    def pack_b(self, shape: GemmShape, b, b_off: int, count: int = 1, stride: int = 0,
               slot: str | None = None, g: Gemm | None = None) -> tuple[Ref, int, int, bool]:
        """Have ``count`` B operands of GEMM ``shape`` (the first at ``b_off`` of ``b``, then
        every ``stride`` elements) packed into the scratchpad in the panels the tuned kernel
        reads contiguously (one launch per execution: a transposed or strided B costs the
        register-tile kernel a cache line per element). Returns ``(ref, off, step, packed)``:
        matrix ``i`` lies at ``off + i * step`` of ``ref`` (its own place, ``packed`` false,
        when the tuned kernel reads plain B); pass ``packed`` on to :meth:`gemm`."""
        if self.dry:
            size = shape.k * (shape.n + MAX_PANEL - 1)  # n rounded up to any panel width
            self.steps.append(_Dry("pack_b"))
            return SCRATCH, self.alloc(count * size, slot), size, True
        if g is None:
            g = get_gemm(self.engine, self._math(shape), static_b=True)
        if not g.packed:
            return b, int(b_off), int(stride), False
        off = self.alloc(count * g.packed_size, slot)
        pk = g.packer(count, int(stride))
        self.launch(pk, g.packer_args(pk, b, int(b_off), SCRATCH, off, count, int(stride)))
        return SCRATCH, off, g.packed_size, True

    def pack_b_batched(self, shape: GemmShape, batch: int, b, b_off: int, stride: int,
                       slot: str | None = None) -> tuple[Ref, int, int, dict | None]:
        """Have the ``batch`` B operands of a batched GEMM of ``shape`` (the first at
        ``b_off`` of ``b``, then every ``stride`` elements) packed into the panels its tuned
        kernel reads, one launch (e.g. once per execution, for every chunk's products).
        Returns ``(ref, off, step, params)``: pass them on to :meth:`gemm_batched` (B
        ``t`` at ``off + t * step``); ``params`` None where the tuned kernel reads plain B
        (then B stays where it lies)."""
        g = None
        if not self.dry:  # the batch's tuned tile: pack_b packs for it, or leaves B plain
            sh = self._math(shape)
            g = get_gemm(self.engine, sh, static_b=True, kernel=False,
                         params=choose_params(self.engine, sh, static_b=True, batch=batch))
        ref, off, step, packed = self.pack_b(shape, b, b_off, batch, stride, slot=slot, g=g)
        return ref, off, step, (g.params if packed and g is not None else None)

    def gemm_batched(self, shape: GemmShape, batch: int, stride_a: int, stride_b: int,
                     stride_c: int, a, a_off, b, b_off, c, c_off,
                     bias: Ref | None = None, epilogue: dict | None = None,
                     params: dict | None = None) -> None:
        """``batch`` GEMMs of one ``shape`` in one launch, operand ``t`` at ``off + t *
        stride``, with the parameters tuned for one of them. Where the rules take m or k at
        run time, the strides are bound at launch too: one program for every m (k) of its
        class (e.g. Winograd's tile counts). ``bias`` and ``epilogue`` bind the epilogue's
        operands as in :meth:`gemm`. ``params``: those :meth:`pack_b_batched` returned, B
        then read in their panels."""
        if self.dry:
            self.steps.append(_Dry("gemm"))
            return
        panel = None
        if params is None:
            params = choose_params(self.engine, shape, static_b=False, batch=batch)
        else:
            panel = int(params["cols"])
        k = gemm_kernel(self.engine, self._math(shape), params, batch=batch, stride_a=stride_a,
                        stride_b=stride_b, stride_c=stride_c, panel=panel)
        sizes = batch_sizes(shape, stride_a, stride_b, stride_c, batch)
        self.launch(k, **self._operands(bias, epilogue), a=a, b=b, c=c,
                    a_off=a_off, b_off=b_off, c_off=c_off, **sizes)

    def gemm_split(self, shape: GemmShape, a, a_off, b, b_off, c, c_off, splits: int,
                   slot: str | None = None) -> None:
        """``C = op(A) @ op(B) + beta * C`` with k cut into ``splits`` equal slices (it must
        divide k): one batched GEMM writes the slices' products into the scratchpad, a
        reduction adds them into C."""
        m, n, ks = shape.m, shape.n, shape.k // splits
        part = self.alloc(splits * m * n, slot)
        self.gemm_batched(replace(shape, k=ks, ldc=n, beta=0.0), splits,
                          ks * (shape.lda if shape.trans_a else 1),
                          ks * (1 if shape.trans_b else shape.ldb), m * n, a, a_off, b, b_off,
                          SCRATCH, part)
        if self.dry:
            self.steps.append(_Dry("splitk_reduce"))
            return
        self.launch(splitk_reduce(self.engine, shape), part=SCRATCH, c=c,
                    part_off=part, c_off=c_off, nsplits=splits)

    def gemm_int8(self, problem, a, a_off, b, b_off, c, c_off, ldb: int,
                  trans_b: bool = False, stride_b: int = 0, epilogue: dict | None = None,
                  params=None, slot: str | None = None, kweights: tuple | None = None) -> None:
        """Add an integer GEMM ``C = epilogue(op(A) @ op(B))``, ``problem`` an
        :class:`~pydnnl.kernels.gemm_int8.Int8GemmProblem` (A u8/s8 at ``a_off`` of ``a``,
        C at ``c_off`` of ``c``, in elements of their types). B (s8, ``k x n`` at ``b_off``
        of ``b`` with leading dimension ``ldb``, ``n x k`` when ``trans_b``; with
        ``problem.b_batched`` one per batch entry, ``stride_b`` elements apart) is packed into
        the scratchpad at every execution, with its column sums (a src zero point's
        compensation); one launch then computes every batch entry. ``epilogue`` binds the
        epilogue's operands by kernel argument (``bias``, ``src_scale``, ``wei_zp``, ...;
        post-op operands come from their execute arguments); ``params`` (an
        ``Int8Params``) default to the device rule's. ``kweights`` ``(div, mod, t_stride,
        ref)``: with ``problem.src_zp_k``, the per-k weights of the column sums (the src zero
        points in ``ref``, see ``PackProblem.kweights``)."""
        from ..kernels import gemm_int8 as gi
        from .heuristics.gemm_int8 import default_params, pack_split

        p = params if params is not None else default_params(self.engine.info, problem)
        count = problem.batch if problem.b_batched else 1
        pk = gi.PackProblem(n=problem.n, k=problem.k, ldb=int(ldb), trans_b=bool(trans_b),
                            panel=p.panel, count=count, stride_b=int(stride_b),
                            ksplit=pack_split(self.engine.info),
                            kweights=None if kweights is None else tuple(kweights[:3]))
        bp_off = self.alloc(count * pk.packed_size, slot)
        ws_off = self.alloc(count * pk.np_, None if slot is None else slot + ":sums")
        if self.dry:
            self.steps += [_Dry("gemm_int8_pack"), _Dry("gemm_int8")]
            return
        self.launch(self.get("gemm_int8_pack", (gi.GENERATOR_VERSION, pk), lambda _:
                             gi.build_pack(pk)),
                    b=b, bp=SCRATCH, wsum=SCRATCH, b_off=b_off, bp_off=bp_off, ws_off=ws_off,
                    **({} if kweights is None else {"kw": kweights[3]}))
        named = dict(epilogue or {})
        # sizes the program takes as arguments are left out of its key (one program serves
        # every value) and bound here
        kern = self.get("gemm_int8", (gi.GENERATOR_VERSION, gi.program_key(problem, p), p),
                        lambda key: gi.build_gemm_int8(key[1], p))
        named.update(gi.launch_values(problem, p))
        if problem.compensated:
            named.update(wsum=SCRATCH, ws_off=ws_off)
        self.launch(kern, a=a, bp=SCRATCH, c=c, a_off=a_off, bp_off=bp_off, c_off=c_off,
                    m=problem.m, **named)

    def reorder(self, problem: ReorderProblem, src, dst, **operands) -> None:
        """Add a reorder (layout and data type conversion) from ``src`` to ``dst``;
        ``operands``: the scales', zero points' and RNN quantization's kernel arguments by
        name. One between equal dense layouts is a buffer copy (no kernel to generate for its
        sizes); a small plain one the strided program of its class; else the program takes
        its offsets and outer size where it can."""
        if self.dry:
            self.steps.append(_Dry("reorder"))
            return
        copy = contiguous_copy(problem)
        if (copy is not None and isinstance(src, Ref) and isinstance(dst, Ref)
                and (src.key != dst.key or copy[0] + copy[2] <= copy[1]
                     or copy[1] + copy[2] <= copy[0])):
            size = problem.src_dt.itemsize
            self.steps.append(_Copy(src, dst, copy[0] * size, copy[1] * size, copy[2] * size))
            return
        if self.strided_reorder(problem, src=src, dst=dst, **operands):
            return
        rt = runtime_form(problem)
        if rt is not None:  # offsets and the outer size as arguments: shared across shapes
            self.launch(self.get("reorder", rt, build_reorder), src=src, dst=dst,
                        src_off=problem.src_layout[0], dst_off=problem.dst_layout[0],
                        d0=problem.dims[0], **operands)
            return
        self.launch(self.get("reorder", problem, build_reorder), src=src, dst=dst, **operands)

    def strided_reorder(self, problem: ReorderProblem, **operands) -> bool:
        """Add ``problem`` as the strided program of its layout class (every size and stride
        an argument) where the device's rule takes it; ``operands``: the kernel's buffers
        and scalars by name. False (nothing added) elsewhere."""
        from ..kernels.reorder_strided import build_strided_reorder, strided_form
        from .heuristics.reorder import strided_reorder

        elems = int(np.prod(problem.dims)) if problem.dims else 0
        if not strided_reorder(self.engine.info, elems):
            return False
        form = strided_form(problem)
        if form is None:
            return False
        key, sizes = form
        self.launch(self.get("reorder_strided", key, build_strided_reorder), **operands,
                    **sizes)
        return True

    def zero(self, ref: Ref, offset_elems: int, nelems: int, itemsize: int = 4,
             name: str = "zero") -> None:
        """Zeros over ``nelems`` elements (float32 unless ``itemsize`` says otherwise) of
        ``ref`` from element ``offset_elems``; ``name`` is what profiling records."""
        if nelems > 0:
            self.steps.append(_Fill(ref, offset_elems * itemsize, nelems * itemsize, name))

    def primitive(self, prim, args: dict) -> None:
        """Add the execution of another primitive; ``args`` values are memories or
        :class:`Bind` placeholders."""
        self.steps.append(_PrimitiveStep(prim, args, self.engine))

    # -- running -----------------------------------------------------------------------------------
    def run(self, stream, bufs: dict, wait_for=None) -> list:
        """Enqueue every step; ``bufs`` maps keys to buffers (and per-execution scalars).
        Returns the events of the launches."""
        with self._lock:  # bound kernels hold argument state: one execution at a time
            if self._bound is None:
                self._bound = [b for st in self.steps for b in st.bind(self)]
            chain = stream.out_of_order
            evt, events = None, []
            wf = list(wait_for) if wait_for else None
            for b in self._bound:
                w = wf if evt is None else ([evt] if chain else None)
                evt = b.launch(stream, bufs, wait_for=w)
                events.append(evt)
            return events

    def execute(self, stream, args: dict, roles: dict | None = None, **scalars) -> list:
        """Run with a primitive's argument map ``{ARG_*: memory}``: each argument is bound
        under its number, or under ``roles[arg]``; the scratchpad is the user's
        (``ARG_SCRATCHPAD``) or the plan's own; ``scalars`` are per-execution values."""
        # ``_buffer`` rather than the checked ``buffer`` property: primitive.execute has
        # validated the memories and replaced host scalars by device copies
        if roles:
            bufs = {roles.get(a, a): m._buffer for a, m in args.items()}
        else:
            bufs = {a: m._buffer for a, m in args.items()}
        if self.scratch_elems:
            m = args.get(ARG_SCRATCHPAD)
            bufs["scratch"] = (m if m is not None else self._own_scratch()).buffer
        if self._index:
            bufs["idx"] = self._index_memory().buffer
        if self.ws_elems:
            bufs["gemm_ws"] = self._ws_memory().buffer
        bufs.update(scalars)
        return self.run(stream, bufs)

    def _own_scratch(self):
        if self._scratch_mem is None:
            from ..memory import memory
            from ..memory.data_types import data_type
            from ..memory.desc import MemoryDesc

            self._scratch_mem = memory(MemoryDesc([self.scratch_bytes], data_type.u8, "a"),
                                       self.engine)
        return self._scratch_mem

    def _ws_memory(self):
        if self._ws_mem is None:
            from ..memory import memory
            from ..memory.data_types import data_type
            from ..memory.desc import MemoryDesc

            m = memory(MemoryDesc([self.ws_elems], data_type.f32, "a"), self.engine)
            m.write(np.zeros(self.ws_elems, np.float32))  # the counters start at zero
            self._ws_mem = m
        return self._ws_mem

    def _index_memory(self):
        if self._index_mem is None:
            from ..memory import memory
            from ..memory.data_types import data_type
            from ..memory.desc import MemoryDesc

            table = np.concatenate(self._index)
            m = memory(MemoryDesc([table.size], data_type.s32, "a"), self.engine)
            m.write(table)
            self._index_mem = m
        return self._index_mem

    def describe(self) -> str:
        """Step names with counts (``gemm x3 reorder x1``)."""
        names: dict[str, int] = {}
        for st in self.steps:
            names[st.name] = names.get(st.name, 0) + 1
        return " ".join(f"{k}x{v}" for k, v in names.items())
