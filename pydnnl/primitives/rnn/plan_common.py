"""What the forward and backward RNN plans share: named buffers bound at execute time,
input staging into canonical f32 layouts, reorders, zero fills, ordered execution."""
from __future__ import annotations

import threading

import numpy as np

from ...constants import ARG_SCRATCHPAD, ARG_WORKSPACE, rnn_direction
from ...engine import _cl
from ...kernels.compiler import get_kernel
from ...kernels.reorder import ReorderProblem, build_reorder, layout_of
from ...memory import memory
from ...memory.desc import MemoryDesc
from .layout import region_desc


class _Ref:
    """A buffer named in the plan, bound at execute time."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def __repr__(self) -> str:
        return f"_Ref({self.key!r})"


class Rows:
    """A plan step whose launch covers only the first ``rows`` rows of its kernel's grid (the
    sequences still running at a time step)."""

    __slots__ = ("fn", "rows")

    def __init__(self, fn, rows: int):
        self.fn, self.rows = fn, rows


class PlanBase:
    """An ordered list of launches ``(callable, args)``; args may name buffers (:class:`_Ref`)."""

    def __init__(self, pd):
        self.pd = pd
        self.s = pd.shape
        self.engine = pd.get_engine()
        self.spec = pd._spec
        self.steps: list[tuple] = []
        self._launches = None
        self._lock = threading.Lock()
        self.scratch_bytes = pd.scratch.nbytes()
        self.src: dict[str, tuple[_Ref, int]] = {}
        self._idx_parts: list[np.ndarray] = []
        self._idx_total = 0
        self._idx_mem = None
        self.seq = None
        if self.s.ext.seq_lengths is not None:
            from .seqlen import SeqLayout

            self.seq = SeqLayout(self.s.ext.seq_lengths, self.s.T)

    def dynamic_args(self, bufs: dict) -> None:
        """Scalar arguments that change per execution (none by default)."""

    def add_gather(self, src_ref, src_off: int, src_ld: int, dst_ref, dst_off: int, dst_ld: int,
                   width: int, index, accumulate: bool = False) -> None:
        """dst rows <- src rows through an index table (-1: zeros), uploaded at creation."""
        from ...kernels.gather import RowGather
        from ...kernels.reductions import Launcher

        index = np.asarray(index, np.int32)
        i_off = self._idx_total
        self._idx_parts.append(index)
        self._idx_total += index.size
        g = Launcher(self.engine, RowGather(rows=index.size, width=width, src_ld=src_ld,
                                            dst_ld=dst_ld, accumulate=accumulate))
        self.steps.append((g, g.bind(dst=dst_ref, src=src_ref, idx=_Ref("idx"), d_off=dst_off,
                                     s_off=src_off, i_off=i_off)))

    def rows(self, fn, t: int):
        """``fn`` limited to the sequences still running at step t (all rows without lengths)."""
        return fn if self.seq is None or self.seq.batch[t] == self.s.N else Rows(fn, int(self.seq.batch[t]))

    def add_copy_rows(self, src_ref, src_off: int, dst_ref, dst_off: int, rows: int,
                      width: int) -> None:
        """Copy ``rows`` (<= N) contiguous rows of ``width`` elements: one kernel per width,
        compiled for N rows and launched for ``rows`` (row counts vary step by step)."""
        from ...kernels.gather import RowGather
        from ...kernels.reductions import Launcher

        if rows <= 0:
            return
        N = self.s.N
        if getattr(self, "_iota_off", None) is None:
            self._iota_off = self._idx_total
            self._idx_parts.append(np.arange(N, dtype=np.int32))
            self._idx_total += N
        g = Launcher(self.engine, RowGather(rows=N, width=width, src_ld=width, dst_ld=width))
        self.steps.append((Rows(g, rows), g.bind(dst=dst_ref, src=src_ref, idx=_Ref("idx"),
                                                 d_off=dst_off, s_off=src_off,
                                                 i_off=self._iota_off)))

    def stage_inputs(self, inputs: dict, direct: tuple) -> None:
        """Decide where each input is read from: the user's buffer, or (other layouts and data
        types) a canonical f32 copy in the scratchpad made by a reorder at the start."""
        from .forward import kernel_desc

        sc = self.pd.scratch
        for name, arg in inputs.items():
            md = self.pd._descs.get(name)
            if md is None or md.is_zero():
                continue
            if name in direct and md != kernel_desc(name, md):
                off = sc["in_" + name]
                self.add_reorder(_Ref(arg), md, _Ref("scratch"), region_desc(md.dims, off))
                self.src[name] = (_Ref("scratch"), off)
            else:
                self.src[name] = (_Ref(arg), 0)
        if "bias_desc" in inputs and "bias_desc" not in self.src:  # extensions.no_bias
            off = sc["zbias"]
            self.add_zero(_Ref("scratch"), off, sc.sizes["zbias"])
            self.src["bias_desc"] = (_Ref("scratch"), off)

    def add_reorder(self, src_ref, src_md: MemoryDesc, dst_ref, dst_md: MemoryDesc, beta=0.0):
        p = ReorderProblem(dims=src_md.dims, src_dt=src_md.data_type, dst_dt=dst_md.data_type,
                           src_layout=layout_of(src_md), dst_layout=layout_of(dst_md),
                           src_nelems=src_md.nelems_physical(),
                           dst_nelems=dst_md.nelems_physical(), beta=beta)
        kern = get_kernel(self.engine, "reorder", p, lambda: build_reorder(p))
        self.steps.append((kern, (src_ref, dst_ref)))

    def _ltr(self, d: int) -> bool:
        """Whether direction d runs left to right."""
        dr = self.s.direction
        if dr == rnn_direction.unidirectional_left2right:
            return True
        if dr == rnn_direction.unidirectional_right2left:
            return False
        return d == 0

    def _reg(self, name: str, l: int, d: int, t: int, per: int) -> int:
        """Offset of (l, d, t) in a state region of ``per`` elements per step."""
        s = self.s
        return self.ws_off[name] + ((l * s.D + d) * s.T + t) * per

    def weights_for(self, role: str, gemm, src_name: str, col_off: int, count: int,
                    stride: int) -> tuple[_Ref, int, int]:
        """Where GEMM ``gemm`` reads its static B (weights) from: ``(buffer, offset of matrix 0,
        elements between matrices)``. When the kernel wants packed B, a pack kernel copies the
        ``count`` matrices into the scratchpad region ``pk_<role>`` at the start of execute."""
        ref, base = self.src[src_name]
        if not gemm.packed:
            return ref, base + col_off, stride
        off = self.pd.scratch["pk_" + role]
        kern = gemm.packer(base + col_off, count, stride, off)
        self.steps.append((kern, (ref, _Ref("scratch"))))
        return _Ref("scratch"), off, gemm.packed_size

    def add_zero(self, ref, offset_elems: int, nelems: int) -> None:
        if nelems > 0:
            self.steps.append((_fill_zero, (ref, offset_elems * 4, nelems * 4)))

    def _bind(self) -> list:
        """Turn the steps into launches whose constant arguments are set once."""
        from ...kernels.compiler import Kernel
        from ...kernels.matmul import Gemm
        from ...kernels.reductions import Launcher

        out = []
        for fn, fargs in self.steps:
            if isinstance(fn, Rows):
                rows, fn = fn.rows, fn.fn
                if isinstance(fn, Gemm):
                    b = fn.kernel.bound(fn.ordered(*fargs))
                    b.gsize = fn.global_size_for_rows(rows)
                else:  # elementwise and gather kernels: one row per work-group along axis 1
                    b = (fn.kernel if isinstance(fn, Launcher) else fn).bound(fargs)
                    gs = list(b.gsize)
                    gs[1] = min(gs[1], rows * (b.lsize[1] if len(b.lsize) > 1 else 1))
                    b.gsize = tuple(gs)
                out.append(b)
            elif isinstance(fn, Gemm):
                if fn.splits > 1:
                    fargs = tuple(fargs) + (_Ref("scratch"), self.pd.scratch["splitk"])
                out.extend(fn.bound(fargs))
            elif isinstance(fn, Launcher):
                out.append(fn.kernel.bound(fargs))
            elif isinstance(fn, Kernel):
                out.append(fn.bound(fargs))
            else:
                out.append((fn, fargs))
        return out

    def execute(self, stream, args) -> None:
        bufs = {k: m.buffer for k, m in args.items()}
        scratch = args.get(ARG_SCRATCHPAD)
        if scratch is None and self.scratch_bytes:
            scratch = self._scratch_memory()
        if scratch is not None:
            bufs["scratch"] = scratch.buffer
        if ARG_WORKSPACE in args:
            bufs["ws"] = args[ARG_WORKSPACE].buffer
        if self._idx_parts:
            bufs["idx"] = self._index_memory().buffer
        with self._lock:  # bound kernels hold argument state: one execution at a time
            self.dynamic_args(bufs)
            if self._launches is None:
                self._launches = self._bind()
            # kernels of one primitive stay ordered on out-of-order queues too
            chain = stream.out_of_order
            evt = None
            for step in self._launches:
                wait = [evt] if chain and evt is not None else None
                if isinstance(step, tuple):
                    fn, fargs = step
                    evt = fn(stream, *[bufs[a.key] if isinstance(a, _Ref) else a for a in fargs],
                             wait_for=wait)
                else:
                    evt = step.launch(stream, bufs, wait)

    def _index_memory(self) -> memory:
        if self._idx_mem is None:
            from ...memory.data_types import data_type

            table = np.concatenate(self._idx_parts)
            m = memory(MemoryDesc([table.size], data_type.s32, "a"), self.engine)
            m.write(table)
            self._idx_mem = m
        return self._idx_mem

    def _scratch_memory(self) -> memory:
        m = getattr(self, "_scratch", None)
        if m is None:
            m = self._scratch = memory(self.pd.scratchpad_desc(), self.engine)
        return m


def reserve_no_bias(regions, shape) -> None:
    """A zero bias in the scratchpad for primitives created with ``no_bias``."""
    if shape.ext.no_bias:
        regions.add("zbias", shape.L * shape.D * shape.Gb * shape.DHC)


def role_gemm(engine, s, role: str, shape):
    """The launcher of the weight GEMM ``role``. The recurrences (roles ``iter*`` forward,
    ``dh*`` backward: few rows) may be split along k on GPUs (see ``split_k``); not with
    sequence lengths, whose steps launch only the running rows."""
    from ...kernels.matmul import get_gemm

    split = role.startswith(("dh", "iter")) and s.ext.seq_lengths is None
    return get_gemm(engine, shape, static_b=True, split=split)


def reserve_packed(regions, engine, roles: dict, s) -> None:
    """Scratchpad room for the packed weights of each GEMM role that packs them, and for the
    partial products of the roles split along k (one region: the launches run in order)."""
    part = 0
    for role, (shape, _, _, count, _) in roles.items():
        g = role_gemm(engine, s, role, shape)
        if g.packed:
            regions.add("pk_" + role, count * g.packed_size)
        part = max(part, g.part_elems)
    if part:
        regions.add("splitk", part)


def _fill_zero(stream, buf, offset_bytes: int, nbytes: int, wait_for=None):
    cl = _cl()
    evt = cl.enqueue_fill_buffer(stream.queue, buf, np.float32(0), offset_bytes, nbytes,
                                 wait_for=wait_for)
    stream.record("rnn_zero", evt)
    return evt
