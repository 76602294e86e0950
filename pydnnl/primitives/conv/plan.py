"""A convolution plan: the ordered kernel launches of one problem, built once.

Steps are ``(launch, args)``; ``launch(stream, *args, wait_for=...)`` returns an event (the
kernels of :mod:`pydnnl.kernels.compiler` and the GEMM launchers of
:mod:`pydnnl.kernels.matmul` both do). Buffers are named by role (:class:`Ref`: ``src``,
``wei``, ``dst``, ``bias``, ``scratch``) and bound at execution; everything else (scratchpad
offsets, image indices) is fixed when the plan is built.
"""
from __future__ import annotations

from ...kernels.compiler import get_kernel
from ...kernels.conv_common import INDEX_DTYPE
from ...kernels.matmul import GemmShape, get_gemm
from ...kernels.reorder import ReorderProblem, build_reorder
from ...memory.data_types import data_type


class Ref:
    """A buffer role, bound at execution."""

    __slots__ = ("role",)

    def __init__(self, role: str):
        self.role = role

    @property
    def key(self) -> str:
        """The placeholder key :class:`~pydnnl.kernels.compiler.BoundKernel` resolves."""
        return self.role

    def __repr__(self) -> str:
        return f"Ref({self.role!r})"


SRC, WEI, DST, BIAS, SCRATCH = (Ref(r) for r in ("src", "wei", "dst", "bias", "scratch"))
ALIGN = 16  # scratch regions start at multiples of 16 elements (64 bytes)
# widest B panel a tuned GEMM may ask for (4 x 16 lanes on 16-wide SIMD): dry plans, which
# know no tuning parameters, reserve packed B for this width so the real plan always fits
MAX_PANEL = 64


class Plan:
    """Kernel launches of one convolution problem with one solver and its parameters."""

    def __init__(self, engine, solver: str, params: dict, dry: bool = False):
        self.engine = engine
        self.dry = dry  # record the steps without generating or compiling kernels
        self.solver = solver
        self.params = dict(params)
        self.steps: list[tuple] = []
        self.scratch_elems = 0
        self._gemms: dict[tuple, object] = {}
        self._slots: dict[str, tuple[int, int]] = {}
        self._bound: list | None = None

    # -- building --------------------------------------------------------------------------------
    def alloc(self, nelems: int) -> int:
        """Reserve ``nelems`` float32 elements of scratchpad; returns their offset."""
        off = -(-self.scratch_elems // ALIGN) * ALIGN
        self.scratch_elems = off + int(nelems)
        return off

    @property
    def scratch_bytes(self) -> int:
        return self.scratch_elems * 4

    def kernel(self, family: str, problem, build, **named) -> None:
        """Add a launch of the generated kernel ``(family, problem)``; ``named`` maps its
        argument names to :class:`Ref` buffers or ints."""
        if self.dry:
            self.steps.append((family, tuple(named.values())))
            return
        k = get_kernel(self.engine, family, problem, lambda: build(problem))
        args = []
        for name in k.src.arg_names:
            if name not in named:
                raise KeyError(f"{family}: kernel argument {name!r} not bound by the plan")
            v = named[name]
            args.append(v if isinstance(v, Ref) else INDEX_DTYPE(v))
        self.steps.append((k, tuple(args)))

    def _gemm(self, shape: GemmShape, static_b: bool):
        g = self._gemms.get((shape, static_b))
        if g is None:
            g = self._gemms[(shape, static_b)] = get_gemm(self.engine, shape, static_b=static_b)
        return g

    def gemm(self, shape: GemmShape, a, a_off, b, b_off, c, c_off, packed: bool = False) -> None:
        """Add a GEMM; ``packed``: B was placed by :meth:`pack_b` for this shape."""
        if self.dry:
            self.steps.append((shape, (a, a_off, b, b_off, c, c_off)))
            return
        g = self._gemm(shape, packed)
        self.steps.append((g, (a, int(a_off), b, int(b_off), c, int(c_off))))

    def pack_b(self, shape: GemmShape, b, b_off: int, count: int = 1, stride: int = 0,
               slot: str | None = None) -> tuple[Ref, int, int, bool]:
        """Have ``count`` B operands of GEMM ``shape`` (the first at ``b_off`` of ``b``, then
        every ``stride`` elements) packed into the scratchpad in the panels the tuned kernel
        reads contiguously (one launch per execution: a transposed or strided B costs the
        register-tile kernel a cache line per element). Returns ``(ref, off, step, packed)``:
        matrix ``i`` lies at ``off + i * step`` of ``ref`` (its own place, ``packed`` false,
        when the tuned kernel reads plain B); pass ``packed`` on to :meth:`gemm`. Calls with
        the same ``slot`` share one scratch region (later ones must not need more)."""
        if self.dry:
            size = shape.k * (shape.n + MAX_PANEL - 1)  # n rounded up to any panel width
            off = self._region(slot, count * size)
            self.steps.append(("pack_b", (b, SCRATCH)))
            return SCRATCH, off, size, True
        g = self._gemm(shape, True)
        if not g.packed:
            return b, int(b_off), int(stride), False
        off = self._region(slot, count * g.packed_size)
        self.steps.append((g.packer(int(b_off), count, int(stride), off), (b, SCRATCH)))
        return SCRATCH, off, g.packed_size, True

    def gemm_split(self, shape: GemmShape, a, a_off, b, b_off, c, c_off, splits: int,
                   slot: str | None = None) -> None:
        """``C = op(A) @ op(B) + beta * C`` with k cut into ``splits`` equal slices (it must
        divide k): one batched GEMM writes the slices' products into the scratchpad, a
        reduction adds them into C. For GPUs, where a GEMM with small m and n and a huge k
        (backward weights: k = images x points) otherwise runs on a handful of work-groups."""
        from dataclasses import replace

        from ...kernels.conv_im2col import SplitKReduceProblem, build_splitk_reduce

        m, n, ks = shape.m, shape.n, shape.k // splits
        part = self._region(slot, splits * m * n)
        red = SplitKReduceProblem(m=m, n=n, splits=splits, ldc=shape.ldc, beta=shape.beta,
                                  wg=64 if self.engine is None or self.engine.info.type == "gpu"
                                  else 16)
        if self.dry:
            self.steps.append((shape, (a, a_off, b, b_off, SCRATCH, part)))
            self.steps.append(("conv_splitk_reduce", (SCRATCH, c)))
            return
        sub = replace(shape, k=ks, ldc=n, beta=0.0)
        self._batched(sub, splits, ks * (shape.lda if shape.trans_a else 1),
                      ks * (1 if shape.trans_b else shape.ldb), m * n, a, a_off, b, b_off,
                      SCRATCH, part)
        self.kernel("conv_splitk_reduce", red, build_splitk_reduce, part=SCRATCH, c=c,
                    part_off=part, c_off=c_off)

    def gemm_batched(self, shape: GemmShape, batch: int, stride_a: int, stride_b: int,
                     stride_c: int, a, a_off, b, b_off, c, c_off) -> None:
        """``batch`` GEMMs of one ``shape`` in one launch, operand ``t`` at ``off + t *
        stride`` (the FFT solver's per-frequency products, Winograd's 16 x groups ones)."""
        if self.dry:
            self.steps.append((shape, (a, a_off, b, b_off, c, c_off)))
            return
        self._batched(shape, batch, stride_a, stride_b, stride_c, a, a_off, b, b_off, c, c_off)

    def _batched(self, shape: GemmShape, batch, stride_a, stride_b, stride_c, a, a_off, b,
                 b_off, c, c_off) -> None:
        """One launch of ``batch`` GEMMs of ``shape`` with the parameters tuned for one."""
        from ...kernels import gemm as fam
        from ...kernels.matmul import choose_params

        params = choose_params(self.engine, shape, static_b=False)
        prob = fam.GemmProblem(
            m=shape.m, n=shape.n, k=shape.k, trans_a=shape.trans_a, trans_b=shape.trans_b,
            alpha=shape.alpha, beta=shape.beta, lda=shape.lda, ldb=shape.ldb, ldc=shape.ldc,
            batch=batch, stride_a=stride_a, stride_b=stride_b, stride_c=stride_c,
            runtime_offsets=True)
        k = get_kernel(self.engine, "gemm", fam.cache_key(prob, params),
                       lambda: fam.build_gemm(prob, params))
        vals = {"a": a, "b": b, "c": c, "a_off": INDEX_DTYPE(a_off),
                "b_off": INDEX_DTYPE(b_off), "c_off": INDEX_DTYPE(c_off)}
        self.steps.append((k, tuple(vals[nm] for nm in k.src.arg_names)))

    def _region(self, slot: str | None, nelems: int) -> int:
        if slot is None:
            return self.alloc(nelems)
        have = self._slots.get(slot)
        if have is None:
            have = self._slots[slot] = (self.alloc(nelems), nelems)
        if nelems > have[1]:
            raise ValueError(f"plan: scratch slot {slot!r} holds {have[1]} elements, "
                             f"{nelems} asked")
        return have[0]

    def reorder(self, dims, src_ref, src_layout, src_n, dst_ref, dst_layout, dst_n) -> None:
        if self.dry:
            self.steps.append(("reorder", (src_ref, dst_ref)))
            return
        p = ReorderProblem(dims=tuple(dims), src_dt=data_type.f32, dst_dt=data_type.f32,
                           src_layout=src_layout, dst_layout=dst_layout, src_nelems=src_n,
                           dst_nelems=dst_n)
        k = get_kernel(self.engine, "reorder", p, lambda: build_reorder(p))
        self.steps.append((k, (src_ref, dst_ref)))

    # -- running ---------------------------------------------------------------------------------
    def run(self, stream, bufs: dict, wait_for=None) -> list:
        """Enqueue every step; ``bufs`` maps roles to ``pyopencl.Buffer``. Returns the events.

        The first run binds each step to a private kernel object whose constant arguments
        (offsets, image indices) are set once; later runs only set a buffer that changed
        (pyopencl's ``set_args`` costs tens of microseconds per launch, a tenth of a small
        layer's time)."""
        if self._bound is None:
            self._bound = [self._bind(fn, fargs) for fn, fargs in self.steps]
        chain = stream.out_of_order
        evt = None
        events = []
        wf = list(wait_for) if wait_for else None
        for b in self._bound:
            w = wf if evt is None else ([evt] if chain else None)
            evt = b.launch(stream, bufs, wait_for=w)
            events.append(evt)
        return events

    @staticmethod
    def _bind(fn, fargs):
        from ...kernels.matmul import Gemm

        if isinstance(fn, Gemm):
            return fn.kernel.bound(fn.ordered(*fargs))
        return fn.bound(fargs)

    def describe(self) -> str:
        names = {}
        for fn, _ in self.steps:
            n = getattr(fn, "name", None) or type(fn).__name__.lower()
            names[n] = names.get(n, 0) + 1
        return " ".join(f"{k}x{v}" for k, v in names.items())
