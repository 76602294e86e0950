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

    def __repr__(self) -> str:
        return f"Ref({self.role!r})"


SRC, WEI, DST, BIAS, SCRATCH = (Ref(r) for r in ("src", "wei", "dst", "bias", "scratch"))
ALIGN = 16  # scratch regions start at multiples of 16 elements (64 bytes)


class Plan:
    """Kernel launches of one convolution problem with one solver and its parameters."""

    def __init__(self, engine, solver: str, params: dict, dry: bool = False):
        self.engine = engine
        self.dry = dry  # record the steps without generating or compiling kernels
        self.solver = solver
        self.params = dict(params)
        self.steps: list[tuple] = []
        self.scratch_elems = 0
        self._gemms: dict[GemmShape, object] = {}

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

    def gemm(self, shape: GemmShape, a, a_off, b, b_off, c, c_off) -> None:
        if self.dry:
            self.steps.append((shape, (a, a_off, b, b_off, c, c_off)))
            return
        g = self._gemms.get(shape)
        if g is None:
            g = self._gemms[shape] = get_gemm(self.engine, shape)
        self.steps.append((g, (a, int(a_off), b, int(b_off), c, int(c_off))))

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
        """Enqueue every step; ``bufs`` maps roles to ``pyopencl.Buffer``. Returns the events."""
        chain = stream.out_of_order
        evt = None
        events = []
        wf = list(wait_for) if wait_for else None
        for fn, fargs in self.steps:
            args = [bufs[a.role] if isinstance(a, Ref) else a for a in fargs]
            w = wf if evt is None else ([evt] if chain else None)
            evt = fn(stream, *args, wait_for=w)
            events.append(evt)
        return events

    def describe(self) -> str:
        names = {}
        for fn, _ in self.steps:
            n = getattr(fn, "name", None) or type(fn).__name__.lower()
            names[n] = names.get(n, 0) + 1
        return " ".join(f"{k}x{v}" for k, v in names.items())
