"""Hand-written SGEMM for NVIDIA GPUs: ``C = alpha * op(A) @ op(B) + beta * C`` as OpenCL C.

The loopy family (:mod:`pydnnl.kernels.gemm`) tops out near two thirds of cuBLAS on an H100;
this generator writes the classic SIMT blocking by hand:

* a work-group of ``(bm / tm) * (bn / tn)`` work-items computes a ``bm x bn`` block of C, each
  work-item a ``tm x tn`` register tile made of 4x4 pieces spread ``bm / (tm / 4)`` rows (and
  ``bn / (tn / 4)`` columns) apart, so that its shared-memory reads are float4s that a warp
  reads without bank conflicts;
* per ``bk`` slice of k, A and B tiles go through ``__local`` memory, both k-major (A is
  stored transposed: ``As[k][m]``), two buffers deep: the next slice is loaded from global
  memory into registers while the current one is multiplied, then stored into the other
  buffer, one barrier per slice;
* global accesses are float4 where the operand's offset and leading dimension allow it: the
  ``aligned`` kernel assumes it (its caller checks the offsets), the general one tests the
  offsets per work-group and picks float4 or scalar loads per access; rows (or
  columns) past C's edge read a clamped valid row and are never stored, so the main loop has
  no bounds tests.

With ``NvTile.mma`` the product runs on the tensor cores instead: TF32 ``mma.sync.aligned.m16n8k8``
through inline PTX (the driver's OpenCL compiler takes ``asm``), each warp a ``wm x wn`` tile of
16x8 accumulators; the tiles are rounded to TF32 (``cvt.rna``) once, when they are stored into
shared memory, whose rows are padded by 8 so that the fragment reads hit 32 distinct banks.
(Permuting each warp tile's columns so that a lane reads its fragments as float4s measured
10-50% slower on the H100: the permuted stores conflict.)
Callers pick it only where the user's ``fpmath_mode`` allows TF32. With ``NvTile.stages``
the TF32 kernel copies its tiles from global into shared memory with ``cp.async`` instead of
through registers, ``stages - 1`` slices ahead of the one multiplied (a B with rows along k
kept n-major, a gathered A's float4s outside the image copied as zeros), and rounds each
fragment to TF32 as it is read: the same bits as the register-staged kernel.

Sizes at run time (``GemmProblem.runtime_m``, ``runtime_k``): the kernel takes ``long m``
and ``long ksize`` after the offsets; a run-time m clamps the A rows each work-item loads
(once, before the k loop) and guards the stores, its grid is ``KernelSource.grid`` over
``m``; a run-time k is the k loop's trip count (``ksize / bk``: whole slices only) and, for
a dense plain A, its leading dimension. (An ``#pragma unroll`` 2 or 4 on the run-time k loop
measured 10-40% slower on the H100.)

Coverage (:func:`supports`): float32, plain B, any baked ``k`` (a partial last slice reads
zeros past k; run-time k and k shared among groups: a multiple of ``bk``),
the contiguous extent of a transposed A (``m``) or plain B (``n``) a multiple of 4; batches,
run-time offsets, any ``lda/ldb/ldc``, ``alpha`` and ``beta``, and the fused epilogue of
:class:`~pydnnl.kernels.gemm.GemmProblem` (scales, bias, post-ops) applied in registers before
the store, written as C from the chain of :mod:`pydnnl.kernels.post_ops` (scales are read
per element, unlike a bias over C's rows: not measured on NVIDIA). Pure: returns a
:class:`~pydnnl.kernels.source.KernelSource`; nothing here touches a device.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .clhelpers import batch_position
from .clhelpers import c_mapper as _c_mapper
from .gemm import GemmProblem, has_epilogue, scale_names
from .source import KernelSource

__all__ = ["NvTile", "supports", "build_gemm_nv", "aligned_offsets", "smem_bytes", "workspace",
           "counters_at",
           "GENERATOR_VERSION"]

GENERATOR_VERSION = "gemm_nv-10"

#: tensor-core kinds: (k per mma.sync, its PTX shape and types, the packing conversion of a
#: pair of floats into one 32-bit register, or None where each register holds one TF32)
MMA_KINDS = {
    "tf32": (8, "m16n8k8.row.col.f32.tf32.tf32.f32", None),
    "bf16": (16, "m16n8k16.row.col.f32.bf16.bf16.f32", "cvt.rn.bf16x2.f32"),
    "f16": (16, "m16n8k16.row.col.f32.f16.f16.f32", "cvt.rn.f16x2.f32"),
}


@dataclass(frozen=True)
class NvTile:
    """Blocking of one kernel: C block ``bm x bn``, k slice ``bk``, register tile ``tm x tn``
    (multiples of 4); ``maxrreg`` caps registers per work-item (NVIDIA compiler option).

    ``mma``: tensor-core kernel, one warp per ``wm x wn`` tile of C (``tm``/``tn`` unused):
    ``"tf32"`` (m16n8k8), ``"bf16"`` or ``"f16"`` (m16n8k16, ``bk`` a multiple of 16).
    """

    bm: int = 128
    bn: int = 128
    bk: int = 8
    tm: int = 8
    tn: int = 8
    maxrreg: int | None = None
    mma: str | None = None
    wm: int = 64
    wn: int = 32
    #: 16-bit kinds: tiles kept packed in shared memory (see ``_Gen.packed``)
    packed: bool = False
    #: SIMT only: k-groups per work-group, each of ``group_threads`` work-items computing the
    #: whole block over its own contiguous share of k's slices (its own shared buffers); their
    #: register tiles are then added through shared memory before the epilogue. Shortens the
    #: chain of slices a work-item walks where C has few blocks and k is long
    ksplit: int = 1
    #: work-groups per block of C (grid axis 2), each over its contiguous share of
    #: k's slices. Each writes its register tile to a workspace, counts its arrival on the
    #: block's counter and the last to arrive adds the shares in slice order (the sum does not
    #: depend on who arrives last), resets the counter and runs the epilogue: one launch for a
    #: C of few blocks and a long k (a classifier's 32 x 1000 x 2048). See :func:`workspace`
    kslices: int = 1
    #: the global fence between a share's stores and its arrival: ``"cl"`` (OpenCL's
    #: ``mem_fence``) or ``"ptx"`` (NVIDIA's ``membar.gl``, which the OpenCL fence does not
    #: promise across work-groups)
    fence: str = "cl"
    #: tensor cores (tf32) only: 0 keeps the register-staged double buffer; 2 or more copies
    #: the tiles from global into shared memory with ``cp.async`` (sm_80), that many slices
    #: in flight, no registers in between; the fragments are rounded to TF32 as they are read
    stages: int = 0

    @property
    def group_threads(self) -> int:
        """Work-items of one k-group (the whole work-group unless ``ksplit``)."""
        if self.mma:
            return (self.bm // self.wm) * (self.bn // self.wn) * 32
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def threads(self) -> int:
        return self.group_threads * self.ksplit

    def check(self) -> None:
        if self.mma is not None:
            if self.mma not in MMA_KINDS:
                raise ValueError(f"NvTile: mma must be None or one of {', '.join(MMA_KINDS)}, "
                                 f"got {self.mma!r}")
            kstep = MMA_KINDS[self.mma][0]
            if self.packed and MMA_KINDS[self.mma][2] is None:
                raise ValueError(f"NvTile: packed tiles need a 16-bit mma kind, got "
                                 f"{self.mma!r}")
            if self.wm % 16 or self.wn % 8 or self.bk % kstep or self.bm % self.wm \
                    or self.bn % self.wn:
                raise ValueError(f"NvTile: warp tile {self.wm}x{self.wn} (multiples of 16x8) "
                                 f"must divide the block {self.bm}x{self.bn}; bk {self.bk} a "
                                 f"multiple of {kstep}")
        for name in ("bm", "bn", "bk", "tm", "tn"):
            v = getattr(self, name)
            if v < 4 or v % 4:
                raise ValueError(f"NvTile: {name} must be a multiple of 4, got {v}")
        if self.bm % self.tm or self.bn % self.tn:
            raise ValueError(f"NvTile: the register tile {self.tm}x{self.tn} must divide the "
                             f"block {self.bm}x{self.bn}")
        t = self.group_threads
        if t < 32 or self.threads > 1024:
            raise ValueError(f"NvTile: {self.threads} work-items per group (needs 32..1024)")
        if self.ksplit < 1 or (self.ksplit > 1 and self.mma):
            raise ValueError(f"NvTile: ksplit {self.ksplit} needs the SIMT kernel (no mma)")
        if self.kslices < 1 or (self.kslices > 1 and self.ksplit > 1):
            raise ValueError(f"NvTile: kslices {self.kslices} needs a kernel without "
                             f"k-groups (ksplit {self.ksplit})")
        if self.stages and (self.stages < 2 or self.stages > 8 or self.mma != "tf32"):
            raise ValueError(f"NvTile: stages {self.stages} needs 2..8 and mma 'tf32' "
                             f"(got mma {self.mma!r})")
        if self.fence not in ("cl", "ptx"):
            raise ValueError(f"NvTile: fence must be 'cl' or 'ptx', got {self.fence!r}")
        if self.ksplit > 1 and (self.ksplit - 1) * self.bm * self.bn \
                > _smem_floats(self) * self.ksplit:
            raise ValueError(f"NvTile: the register tiles of {self.ksplit} k-groups do not fit "
                             f"the shared buffers")
        for what, elems in (("A", self.bm * self.bk), ("B", self.bn * self.bk)):
            if elems % (4 * t):
                raise ValueError(f"NvTile: the {what} tile ({elems} floats) must split into "
                                 f"float4s evenly over {t} work-items")


def _a_kcontig(pr: GemmProblem) -> bool:
    """A's rows run along k (plain A): its tile is loaded along k and stored transposed."""
    return not pr.trans_a


def _b_kcontig(pr: GemmProblem) -> bool:
    return pr.trans_b


def supports(pr: GemmProblem, tile: NvTile) -> bool:
    """Whether :func:`build_gemm_nv` covers ``pr`` with ``tile``."""
    try:
        tile.check()
    except ValueError:
        return False
    if pr.dtype != np.dtype(np.float32) or pr.acc_dtype != np.dtype(np.float32):
        return False
    if pr.panel_width is not None:
        return False
    if pr.a_conv is not None and pr.trans_a:  # gathered columns: float4 channels, whole
        # slices of points (a batch entry's points follow from its stride, see a_conv)
        if pr.a_conv[2] % 4 or pr.k % tile.bk or tile.ksplit > 1 or tile.kslices > 1 \
                or pr.runtime_k:
            return False
    elif pr.a_conv is not None:  # a gathered A: whole slices inside one tap, float4 channels
        c = pr.a_conv[2]
        if c % tile.bk or c % 4 or tile.ksplit > 1 or tile.kslices > 1 or pr.runtime_k \
                or pr.batch > 1:
            return False
    # cp.async: whole slices of k
    if tile.stages and pr.k % tile.bk:
        return False
    # a partial last slice (k not a multiple of bk) reads zeros past k: baked k, one k-group
    # walking every slice (the shares are counted in whole slices)
    if pr.k % tile.bk and (pr.runtime_k or tile.ksplit > 1 or tile.kslices > 1):
        return False
    # k-groups walk equal whole shares of the slices, counted at build time
    if tile.ksplit > 1 and (pr.runtime_k or (pr.k // tile.bk) % tile.ksplit):
        return False
    # a block's work-groups: one C (no batch), k's slices in whole shares
    if tile.kslices > 1 and (pr.batch > 1 or pr.runtime_k
                             or (pr.k // tile.bk) % tile.kslices):
        return False
    # a float4 along a contiguous m (transposed A) or n (plain B) is wholly inside or outside
    if (pr.trans_a and pr.m % 4) or (not pr.trans_b and pr.n % 4):
        return False
    # 32-bit indices inside one batch entry (the base pointers are 64-bit)
    epi = [pr.bias[2]] if pr.bias is not None else []
    epi += [op[4] for op in pr.post_ops if op[0] == "binary"]
    return max([pr.extent("a"), pr.extent("b"), pr.extent("c")] + epi) < 2 ** 31 - 1


def _float4_load(p: str, v: str) -> str:
    """A float4 read at pointer expression ``p``: aligned (``v`` "1"), element-wise ("0"),
    or as the C condition ``v`` says."""
    if v == "1":
        return f"*(__global const float4*)({p})"
    if v == "0":
        return f"vload4(0, {p})"
    return f"({v} ? *(__global const float4*)({p}) : vload4(0, {p}))"


def _f(x: float) -> str:
    return repr(float(np.float32(x))) + "f"


class _Gen:
    def __init__(self, pr: GemmProblem, t: NvTile, aligned: bool):
        self.pr, self.t, self.aligned = pr, t, aligned
        self.nt = t.group_threads  # one k-group's work-items (the loads' and tiles' owners)
        self.wx = t.bn // t.tn  # work-items along n
        # row padding of the shared tiles (keeps float4 alignment, spreads banks), see _pads
        self.pa = self.pb = (_packed_pads() if t.packed else _pads(t))[0]
        # tensor cores with a plain A (rows along k): A stays m-major in shared memory, rows
        # padded (float4 stores as loaded; a fragment's reads conflict-free) instead of
        # transposed into k rows (4 scalar stores per float4, 4-way conflicts)
        self.a_mmajor = bool(t.mma) and _a_kcontig(pr)
        self.rak = t.bk + _pads(t)[1]
        self.sza = t.bm * self.rak if self.a_mmajor else t.bk * (t.bm + self.pa)
        self.szb = t.bk * (t.bn + self.pb)
        # cp.async copies B's rows as they lie: a transposed B (rows along k) stays n-major,
        # rows of bk + 4 like an m-major A
        self.b_nmajor = bool(t.stages) and _b_kcontig(pr)
        if self.b_nmajor:
            self.szb = t.bn * self.rak
        # ``packed``: 16-bit kinds keep the tiles in shared memory as they are multiplied, one
        # 32-bit word per pair of k (the smaller in the low half), rounded once when stored;
        # half the bytes, so 32-deep slices fit. Pairs across two loaded rows are stored as
        # 16-bit halves, which costs: see the rule in heuristics/gemm.py
        self.packed = t.packed
        if self.packed:
            self.rak = t.bk // 2 + _packed_pads()[1]
            kp = t.bk // 2
            self.sza = t.bm * self.rak if self.a_mmajor else kp * (t.bm + self.pa)
            self.szb = kp * (t.bn + self.pb)
        # sizes as C: constants, or the run-time ``m``/``ksize`` (int copies ``M``/``K``)
        self.M = "M" if pr.runtime_m else str(pr.m)
        self.K = "K" if pr.runtime_k else str(pr.k)
        dense_a = pr.runtime_k and not pr.trans_a and pr.lda == pr.k
        self.lda = "K" if dense_a else str(pr.lda)
        #: k is not a multiple of bk: the last slice is partial, its loads past k read zeros
        self.tail = not pr.runtime_k and pr.k % t.bk != 0

    # {{{ global -> registers -> shared

    def _loads(self, which: str):
        """Per float4 this work-item loads of ``which``'s tile: C expressions of its (clamped)
        element offset at slice 0, how far it moves per slice, and where it lands in shared
        memory (``(k_row, col)``, transposed when the operand runs along k)."""
        pr, t = self.pr, self.t
        if which == "a":
            kcontig, span, dim, ld = _a_kcontig(pr), t.bm, self.M, self.lda
            # a run-time m clamps always (once per load, before the k loop: no cost there)
            ragged = bool(pr.runtime_m) or pr.m % span
            base_expr = "m0"
        else:
            kcontig, span, dim, ld = _b_kcontig(pr), t.bn, str(pr.n), str(pr.ldb)
            ragged = pr.n % span
            base_expr = "n0"
        count = span * t.bk // (4 * self.nt)
        out = []
        for i in range(count):
            lin = f"(tid + {i * self.nt})"
            if kcontig:  # rows of the tile run along k: bk/4 float4s per row
                q = t.bk // 4
                r = f"({lin} / {q})"
                kc = f"(({lin} % {q}) * 4)"
                g = f"({base_expr} + {r})"
                if ragged:
                    g = f"min({g}, {_minus(dim, 1)})"
                off = f"{g} * {ld} + {kc}"
                step = t.bk
                dst = (kc, r, True)
            else:  # rows run along m (or n): span/4 float4s per k row
                q = span // 4
                kr = f"({lin} / {q})"
                c = f"(({lin} % {q}) * 4)"
                g = f"({base_expr} + {c})"
                if ragged:
                    g = f"min({g}, {_minus(dim, 4)})"
                off = f"{kr} * {ld} + {g}"
                step = f"{t.bk} * {ld}" if ld.startswith("K") else t.bk * int(ld)
                dst = (kr, c, False)
            out.append((off, step, dst))
        return out

    # }}}

    def body(self, vec: dict) -> str:
        """The block's whole computation. ``vec["a"|"b"|"c"]``: a C condition (or "1"/"0")
        under which that operand is accessed as aligned float4s."""
        pr, t = self.pr, self.t
        la, lb = self._loads("a"), self._loads("b")
        L = []
        w = L.append
        conv = pr.a_conv
        if conv is not None and pr.trans_a:
            self._gather_cols(w, la)
        elif conv is not None:
            self._gather_rows(w, la)
        for name, loads in (("a", la), ("b", lb)):
            if name == "a" and conv is not None:
                continue
            for i, (off, step, _) in enumerate(loads):
                if t.ksplit > 1:  # this k-group's first slice
                    off = f"{off} + kg * {self.nk_group()} * ({step})"
                if t.kslices > 1:  # this work-group's first slice
                    off = f"{off} + (int)get_group_id(2) * {self.nk_group()} * ({step})"
                w(f"int {name}p{i} = {off};")
        if not t.stages:
            for name, loads in (("a", la), ("b", lb)):
                w(f"float4 r{name}[{len(loads)}];")

        def gload(name, tail=None):
            """Loads of the next slice; ``tail``: the index of the partial last slice, whose
            elements past k are zeros (and not read)."""
            ptr, v = name.upper(), vec[name]
            if name == "a" and conv is not None:
                return (self._gather_slice_t(w, la, v) if pr.trans_a
                        else self._gather_slice(w, la, v))
            # each load's first k inside the slice, and whether its float4 runs along k
            for i, (_, step, (ke, _, along_k)) in enumerate(la if name == "a" else lb):
                p = f"{ptr} + {name}p{i}"
                full = _float4_load(p, v)
                if tail is None:
                    w(f"r{name}[{i}] = {full};")
                else:
                    kg = f"{tail * t.bk} + {ke}"
                    if along_k:
                        parts = ", ".join(f"({kg} + {e} < {pr.k}) ? ({p})[{e}] : 0.0f"
                                          for e in range(4))
                        w(f"r{name}[{i}] = (float4)({parts});")
                    else:
                        w(f"r{name}[{i}] = ({kg} < {pr.k}) ? {full} : (float4)(0.0f);")
                w(f"{name}p{i} += {step};")

        # TF32: rounded once, when stored; 16-bit kinds convert pairs as the fragments are read
        cvt = "pd_tf32" if t.mma == "tf32" else ""

        def sstore(name, buf):
            arr, pad, span = ("As", self.pa, t.bm) if name == "a" else ("Bs", self.pb, t.bn)
            row = span + pad
            if self.packed:
                return self._sstore_packed(w, name, buf, la if name == "a" else lb, arr, row)
            for i, (_, _, (r, c, transposed)) in enumerate(la if name == "a" else lb):
                if name == "a" and self.a_mmajor:  # (k column r, m row c): as loaded
                    v = f"{cvt}4(r{name}[{i}])" if cvt else f"r{name}[{i}]"
                    w(f"*(__local float4*)&As[{buf} + {c} * {self.rak} + {r}] = {v};")
                elif transposed:  # the float4 runs along k: four k rows, one column
                    for q, comp in enumerate("xyzw"):
                        w(f"{arr}[{buf} + ({r} + {q}) * {row} + {c}] = "
                          f"{cvt}(r{name}[{i}].{comp});")
                else:
                    w(f"*(__local float4*)&{arr}[{buf} + {r} * {row} + {c}] = "
                      f"{cvt}4(r{name}[{i}]);" if cvt else
                      f"*(__local float4*)&{arr}[{buf} + {r} * {row} + {c}] = r{name}[{i}];")

        def issue(stage):
            """cp.async of the next slice into shared buffer ``stage`` (a C expression)."""
            for name, loads in (("a", la), ("b", lb)):
                arr, ptr, v = name.capitalize() + "s", name.upper(), vec[name]
                sz, row = (self.sza, t.bm + self.pa) if name == "a" else (self.szb,
                                                                         t.bn + self.pb)

                def copy(dst, src, size=None, v=v):
                    z = "z" if size else ""
                    tail = f", {size}" if size else ""
                    if v == "1":
                        w(f"pd_cp16{z}({dst}, {src}{tail});")
                    elif v == "0":
                        w(f"pd_cp4x4{z}({dst}, {src}{tail});")
                    else:
                        w(f"if ({v}) pd_cp16{z}({dst}, {src}{tail}); "
                          f"else pd_cp4x4{z}({dst}, {src}{tail});")

                if name == "a" and conv is not None:
                    (self._gather_slice_async_t if pr.trans_a
                     else self._gather_slice_async)(w, loads, stage, copy)
                    continue
                for i, (_, step, (r, c, _)) in enumerate(loads):
                    nmajor = self.a_mmajor if name == "a" else self.b_nmajor
                    at = f"{c} * {self.rak} + {r}" if nmajor else f"{r} * {row} + {c}"
                    copy(f"{arr} + ({stage}) * {sz} + {at}", f"{ptr} + {name}p{i}")
                    w(f"{name}p{i} += {step};")

        if t.mma:
            self._mma_body(w, gload, sstore, issue, vec_c=vec["c"])
            return "\n".join("    " + x for x in L)

        ga, gb = t.tm // 4, t.tn // 4
        sa, sb = t.bm // ga, t.bn // gb  # distance between a work-item's 4-row pieces
        sza, szb = self.sza, self.szb
        comps = "xyzw"
        w("float acc[%d][%d];" % (t.tm, t.tn))
        w("#pragma unroll")
        w(f"for (int i = 0; i < {t.tm}; ++i)")
        w("#pragma unroll")
        w(f"  for (int j = 0; j < {t.tn}; ++j) acc[i][j] = 0.0f;")

        def slice_():
            w(f"  __local const float* as = As + cur * {sza} + ty * 4;")
            w(f"  __local const float* bs = Bs + cur * {szb} + tx * 4;")
            w("#pragma unroll")
            w(f"  for (int kk = 0; kk < {t.bk}; ++kk) {{")
            for g in range(ga):
                w(f"    const float4 fa{g} = *(__local const float4*)(as + kk * {t.bm + self.pa}"
                  f" + {g * sa});")
            for h in range(gb):
                w(f"    const float4 fb{h} = *(__local const float4*)(bs + kk * {t.bn + self.pb}"
                  f" + {h * sb});")
            for i in range(t.tm):
                for j in range(t.tn):
                    av = f"fa{i // 4}.{comps[i % 4]}"
                    bv = f"fb{j // 4}.{comps[j % 4]}"
                    w(f"    acc[{i}][{j}] = fma({av}, {bv}, acc[{i}][{j}]);")
            w("  }")

        self._pipeline(w, gload, sstore, sza, szb, slice_)
        if t.ksplit > 1:
            # the k-groups' tiles added into group 0's, which alone stores (the loop ended
            # on a barrier: the shared buffers are free)
            tile_n = t.tm * t.tn
            w("if (kg > 0) {")
            w("#pragma unroll")
            w(f"  for (int i = 0; i < {t.tm}; ++i)")
            w("#pragma unroll")
            w(f"    for (int j = 0; j < {t.tn}; ++j)")
            w(f"      As_all[((kg - 1) * {tile_n} + i * {t.tn} + j) * {self.nt} + tid] = "
              "acc[i][j];")
            w("}")
            w("barrier(CLK_LOCAL_MEM_FENCE);")
            w("if (kg == 0) {")
            w(f"for (int h = 0; h < {t.ksplit - 1}; ++h)")
            w("#pragma unroll")
            w(f"  for (int i = 0; i < {t.tm}; ++i)")
            w("#pragma unroll")
            w(f"    for (int j = 0; j < {t.tn}; ++j)")
            w(f"      acc[i][j] += As_all[(h * {tile_n} + i * {t.tn} + j) * {self.nt} + tid];")
        if t.kslices > 1:
            self._slices_meet(w)
        # C: rows m0 + g*sa + ty*4 + q, columns n0 + h*sb + tx*4 + (0..3)
        breg = {}
        if self.bias_per_column():
            breg = self.bias_loads(w, [f"(n0 + {h * sb} + tx * 4 + {e})" for h in range(gb)
                                       for e in range(4)])
        for g in range(ga):
            for q in range(4):
                i = g * 4 + q
                w("{")
                w(f"  const int row = m0 + {g * sa} + ty * 4 + {q};")
                w(f"  if (row < {self.M}) {{")
                self._scatter_row(w)
                for h in range(gb):
                    w(f"    const int col{h} = n0 + {h * sb} + tx * 4;")
                    self._store_c(w, vec["c"], f"col{h}",
                                  [self._value(f"acc[{i}][{h * 4 + e}]") for e in range(4)],
                                  [breg.get(f"(n0 + {h * sb} + tx * 4 + {e})")
                                   for e in range(4)])
                w("  }")
                w("}")
        if t.ksplit > 1:
            w("}")
        return "\n".join("    " + x for x in L)

    def _gather_rows(self, w, loads) -> None:
        """A gathered from images (``a_conv``): per float4 this work-item loads, its row's
        image base (plus its channels within the slice) and first input row and column."""
        ih, iw, c, _, _, oh, ow, sh, sw, ph, pw = self.pr.a_conv[:11]
        ragged = bool(self.pr.runtime_m) or self.pr.m % self.t.bm
        for i, (_, _, (kc, r, _)) in enumerate(loads):
            g = f"(m0 + {r})"
            if ragged:
                g = f"min({g}, {_minus(self.M, 1)})"
            w(f"const int ag{i} = {g}, an{i} = ag{i} / {oh * ow}, "
              f"aq{i} = ag{i} - an{i} * {oh * ow};")
            w(f"const int ay{i} = aq{i} / {ow}, ax{i} = aq{i} - ay{i} * {ow};")
            w(f"const int ab{i} = an{i} * {ih * iw * c} + {kc};")
            w(f"const int ah{i} = ay{i} * {sh} - {ph}, aw{i} = ax{i} * {sw} - {pw};")
        w("int aks = 0;  // the first k of the next slice of A")

    def _gather_slice(self, w, loads, v: str) -> None:
        """The next slice of a gathered A: one tap and ``bk`` of its channels (the slices lie
        inside taps: ``c`` is a multiple of ``bk``); zeros outside the image."""
        ih, iw, c, _, kw = self.pr.a_conv[:5]
        dh, dw = self.pr.a_conv[11:]
        w("{")
        w(f"  const int tap = aks / {c}, c0 = aks - tap * {c};")
        w(f"  const int ky = tap / {kw}, kx = tap - ky * {kw};")
        for i in range(len(loads)):
            full = _float4_load(f"A + ab{i} + (y * {iw} + x) * {c} + c0", v)
            w(f"  {{ const int y = ah{i} + ky * {dh}, x = aw{i} + kx * {dw};")
            w(f"    ra[{i}] = (y >= 0 && y < {ih} && x >= 0 && x < {iw}) ? {full} : "
              "(float4)(0.0f); }")
        w(f"  aks += {self.t.bk};")
        w("}")

    def _gather_slice_async(self, w, loads, stage: str, copy) -> None:
        """:meth:`_gather_slice` through cp.async: a float4 outside the image copies no
        bytes and lands as zeros (the copy's source size 0)."""
        ih, iw, c, _, kw = self.pr.a_conv[:5]
        dh, dw = self.pr.a_conv[11:]
        w("{")
        w(f"  const int tap = aks / {c}, c0 = aks - tap * {c};")
        w(f"  const int ky = tap / {kw}, kx = tap - ky * {kw};")
        for i, (_, _, (kc, r, _)) in enumerate(loads):
            w(f"  {{ const int y = ah{i} + ky * {dh}, x = aw{i} + kx * {dw};")
            w(f"    const bool in = y >= 0 && y < {ih} && x >= 0 && x < {iw};")
            copy(f"As + ({stage}) * {self.sza} + {r} * {self.rak} + {kc}",
                 f"A + ab{i} + (in ? (y * {iw} + x) * {c} + c0 : 0)", "in")
            w("  }")
        w(f"  aks += {self.t.bk};")
        w("}")

    def _gather_cols(self, w, loads) -> None:
        """A transposed A gathered from images (``a_conv`` with ``trans_a``): per float4 this
        work-item loads, its (fixed) columns' tap and channel, and its row in the slice; the
        first point of the next slice follows the batch entry."""
        pr, t = self.pr, self.t
        c, _, kw = pr.a_conv[2:5]
        ph, pw, dh, dw = pr.a_conv[9:]
        for i, (_, _, (kr, col, _)) in enumerate(loads):
            g = f"(m0 + {col})"
            if pr.m % t.bm:
                g = f"min({g}, {pr.m - 4})"
            w(f"const int ag{i} = {g}, at{i} = ag{i} / {c}, ach{i} = ag{i} - at{i} * {c};")
            w(f"const int aky{i} = at{i} / {kw}, akx{i} = at{i} - aky{i} * {kw};")
            w(f"const int aoy{i} = aky{i} * {dh} - {ph}, aox{i} = akx{i} * {dw} - {pw};")
            w(f"const int akr{i} = {kr};")
        first = f"(int)get_group_id(2) * {pr.stride_a // pr.lda}" if pr.batch > 1 else "0"
        w(f"int aks = {first};  // the first point of the next slice of A")

    def _gather_point(self, w, i: int) -> None:
        """C declaring ``p`` (load ``i``'s point in the slice), its input row ``iy`` and
        column ``ix`` and ``in`` (inside the image)."""
        ih, iw, _, _, _, oh, ow, sh, sw = self.pr.a_conv[:9]
        w(f"  {{ const int p = aks + akr{i}, n = p / {oh * ow}, q = p - n * {oh * ow};")
        w(f"    const int y = q / {ow}, x = q - y * {ow};")
        w(f"    const int iy = y * {sh} + aoy{i}, ix = x * {sw} + aox{i};")
        w(f"    const bool in = iy >= 0 && iy < {ih} && ix >= 0 && ix < {iw};")

    def _gather_slice_t(self, w, loads, v: str) -> None:
        """The next slice of a gathered transposed A: ``bk`` points, each float4 four channels
        of its column's tap; zeros outside the image."""
        ih, iw, c = self.pr.a_conv[:3]
        w("{")
        for i in range(len(loads)):
            self._gather_point(w, i)
            full = _float4_load(f"A + n * {ih * iw * c} + (iy * {iw} + ix) * {c} + ach{i}", v)
            w(f"    ra[{i}] = in ? {full} : (float4)(0.0f); }}")
        w(f"  aks += {self.t.bk};")
        w("}")

    def _gather_slice_async_t(self, w, loads, stage: str, copy) -> None:
        """:meth:`_gather_slice_t` through cp.async (zeros: a copy of source size 0)."""
        ih, iw, c = self.pr.a_conv[:3]
        row = self.t.bm + self.pa
        w("{")
        for i, (_, _, (kr, col, _)) in enumerate(loads):
            self._gather_point(w, i)
            copy(f"As + ({stage}) * {self.sza} + {kr} * {row} + {col}",
                 f"A + (in ? n * {ih * iw * c} + (iy * {iw} + ix) * {c} + ach{i} : 0)", "in")
            w("  }")
        w(f"  aks += {self.t.bk};")
        w("}")

    def _slices_meet(self, w, dims: tuple | None = None) -> None:
        """``kslices``: store this share's tile, arrive; the last arrival adds every share's
        tile in slice order into ``acc`` (the others return). ``dims``: the accumulator
        array's shape where it is not the SIMT register tile's ``(tm, tn)`` (the tensor-core
        kernel's ``(mt, nt, 4)``); each work-item keeps its own elements in the same order in
        every share, so the shares add element by element."""
        t = self.t
        S = t.kslices
        store, add = (self._tile_shares(S) if dims is None else self._flat_shares(S, dims))
        fence = ('asm volatile("membar.gl;" ::: "memory");' if t.fence == "ptx"
                 else "mem_fence(CLK_GLOBAL_MEM_FENCE);")
        w("{")
        w("  const int blk = get_group_id(1) * get_num_groups(0) + get_group_id(0);")
        w(f"  __global float* P = ws + ws_off + (long)blk * {S * t.bm * t.bn};")
        store(w)
        w(f"  {fence}")
        w("  barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);")
        w("  if (tid == 0) {")
        w("    volatile __global int* cnt = (volatile __global int*)(ws + cnt_off) + blk;")
        w("    const int before = atomic_inc(cnt);")
        w(f"    pd_last = before == {S - 1};")
        w("    if (pd_last) atomic_xchg(cnt, 0);  // ready for the next launch")
        w("  }")
        w("  barrier(CLK_LOCAL_MEM_FENCE);")
        w("  if (!pd_last) return;")
        w(f"  {fence}")
        # volatile: the other groups' tiles are read from L2, not a stale L1 line
        w("  volatile __global const float* V = P;")
        add(w)
        w("}")

    def _tile_shares(self, S: int):
        """The SIMT register tile's share store and sum (see :meth:`_slices_meet`)."""
        t = self.t
        tile_n = t.tm * t.tn

        def store(w):
            w("#pragma unroll")
            w(f"  for (int i = 0; i < {t.tm}; ++i)")
            w("#pragma unroll")
            w(f"    for (int j = 0; j < {t.tn}; ++j)")
            w(f"      P[((int)get_group_id(2) * {tile_n} + i * {t.tn} + j) * {self.nt} + tid]"
              " = acc[i][j];")

        def add(w):
            w("#pragma unroll")
            w(f"  for (int i = 0; i < {t.tm}; ++i)")
            w("#pragma unroll")
            w(f"    for (int j = 0; j < {t.tn}; ++j) {{")
            w(f"      float s = V[(i * {t.tn} + j) * {self.nt} + tid];")
            w(f"      for (int h = 1; h < {S}; ++h)")
            w(f"        s += V[(h * {tile_n} + i * {t.tn} + j) * {self.nt} + tid];")
            w("      acc[i][j] = s;")
            w("    }")

        return store, add

    def _flat_shares(self, S: int, dims: tuple):
        """The share store and sum of an accumulator array of shape ``dims``."""
        E = 1
        for d in dims:
            E *= d
        idx = ["i", "j", "e"][:len(dims)]
        lin = idx[0]
        for name, d in zip(idx[1:], dims[1:]):
            lin = f"({lin}) * {d} + {name}"
        acc = "acc" + "".join(f"[{x}]" for x in idx)

        def loops(w, body):
            for d, (x, n) in enumerate(zip(idx, dims)):
                w("#pragma unroll")
                w("  " * (d + 1) + f"for (int {x} = 0; {x} < {n}; ++{x})")
            for line in body:
                w("  " * (len(dims) + 1) + line)

        def store(w):
            loops(w, [f"P[((int)get_group_id(2) * {E} + {lin}) * {self.nt} + tid] = {acc};"])

        def add(w):
            loops(w, ["{", f"  float s = V[({lin}) * {self.nt} + tid];",
                      f"  for (int h = 1; h < {S}; ++h)",
                      f"    s += V[(h * {E} + {lin}) * {self.nt} + tid];",
                      f"  {acc} = s;", "}"])

        return store, add

    def nk_group(self):
        """Slices of k each k-group walks (a C expression or an int; a partial last slice
        counts)."""
        if self.pr.runtime_k:
            return f"{self.K} / {self.t.bk}"
        if self.tail:
            return -(-self.pr.k // self.t.bk)
        return self.pr.k // self.t.bk // self.t.ksplit // self.t.kslices

    def _pipeline(self, w, gload, sstore, sza: int, szb: int, slice_) -> None:
        """The k loop: slice 0 staged into shared memory, then per slice the next one loaded
        from global memory into registers while ``slice_()`` multiplies the current one
        (``cur``), stored into the other buffer, one barrier per slice. A partial last slice
        (``tail``) has loads of its own, which read zeros past k."""
        nk = self.nk_group()
        first = nk - 1 if self.tail and nk == 1 else None
        gload("a", first)
        gload("b", first)
        sstore("a", "0")
        sstore("b", "0")
        w("barrier(CLK_LOCAL_MEM_FENCE);")
        w(f"for (int kt = 0; kt < {nk}; ++kt) {{")
        w("  const int cur = kt & 1;")
        if self.tail:
            w(f"  if (kt + 2 < {nk}) {{")
            gload("a")
            gload("b")
            w(f"  }} else if (kt + 1 < {nk}) {{")
            gload("a", nk - 1)
            gload("b", nk - 1)
            w("  }")
        else:
            w(f"  if (kt + 1 < {nk}) {{")
            gload("a")
            gload("b")
            w("  }")
        slice_()
        w(f"  if (kt + 1 < {nk}) {{")
        sstore("a", f"(cur ^ 1) * {sza}")
        sstore("b", f"(cur ^ 1) * {szb}")
        w("  }")
        w("  barrier(CLK_LOCAL_MEM_FENCE);")
        w("}")

    def _pipeline_async(self, w, issue, slice_) -> None:
        """The k loop with ``cp.async``: the first ``stages - 1`` slices in flight before it;
        per slice, wait for the current one (every work-item's copies: a barrier, which also
        frees the buffer read in the step before), start the copy of the slice ``stages - 1``
        ahead into that buffer, multiply the current one. One commit group per step, empty
        past the last slice, so that the wait counts the same groups everywhere."""
        S, nk = self.t.stages, self.nk_group()
        for s in range(S - 1):
            w(f"if ({s} < {nk}) {{")
            issue(str(s))
            w("}")
            w('asm volatile("cp.async.commit_group;" ::: "memory");')
        w(f"for (int kt = 0; kt < {nk}; ++kt) {{")
        w(f'  asm volatile("cp.async.wait_group {S - 2};" ::: "memory");')
        w("  barrier(CLK_LOCAL_MEM_FENCE);")
        w(f"  if (kt + {S - 1} < {nk}) {{")
        issue(f"(kt + {S - 1}) % {S}")
        w("  }")
        w('  asm volatile("cp.async.commit_group;" ::: "memory");')
        w(f"  const int cur = kt % {S};")
        slice_()
        w("}")

    def _mma_body(self, w, gload, sstore, issue=None, vec_c: str = "0") -> None:
        """The tensor-core main loop and store: warp ``wid`` owns rows ``wm0..wm0+wm`` and
        columns ``wn0..wn0+wn`` of the block as ``(wm/16) x (wn/8)`` m16n8 accumulators;
        lane ``g = lane/4, q = lane%4`` holds rows g, g+8 and columns 2q, 2q+1 of each.
        ``vec_c``: the C condition under which C is 16-byte aligned ("0": never)."""
        t = self.t
        mt, nt_ = t.wm // 16, t.wn // 8
        ra, rb = t.bm + self.pa, t.bn + self.pb
        sza, szb = self.sza, self.szb
        wx = t.bn // t.wn
        w("const int lane = tid & 31, wid = tid >> 5;")
        w("const int g = lane >> 2, q = lane & 3;")
        w(f"const int wm0 = (wid / {wx}) * {t.wm}, wn0 = (wid % {wx}) * {t.wn};")
        w(f"float acc[{mt}][{nt_}][4];")
        w("#pragma unroll")
        w(f"for (int i = 0; i < {mt}; ++i)")
        w("#pragma unroll")
        w(f"  for (int j = 0; j < {nt_}; ++j)")
        w("    acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;")

        kstep, shape, pack = MMA_KINDS[t.mma]
        # tiles copied by cp.async are rounded to TF32 as their fragments are read
        rd = "pd_tf32" if t.stages else ""

        def slice_():
            if pack:
                return slice16()
            if self.a_mmajor:
                w(f"  __local const float* as = As + cur * {sza} + (wm0 + g) * {self.rak}"
                  " + q;")
            else:
                w(f"  __local const float* as = As + cur * {sza} + q * {ra} + wm0 + g;")
            if self.b_nmajor:
                w(f"  __local const float* bs = Bs + cur * {szb} + (wn0 + g) * {self.rak}"
                  " + q;")
            else:
                w(f"  __local const float* bs = Bs + cur * {szb} + q * {rb} + wn0 + g;")
            w("#pragma unroll")
            w(f"  for (int kk = 0; kk < {t.bk}; kk += 8) {{")
            for i in range(mt):
                for r, (dk, dm) in enumerate(((0, 0), (0, 8), (4, 0), (4, 8))):
                    at = (f"{16 * i + dm} * {self.rak} + kk + {dk}" if self.a_mmajor
                          else f"(kk + {dk}) * {ra} + {16 * i + dm}")
                    w(f"    const uint a{i}_{r} = as_uint({rd}(as[{at}]));")
            for j in range(nt_):
                for r, dk in enumerate((0, 4)):
                    at = (f"{8 * j} * {self.rak} + kk + {dk}" if self.b_nmajor
                          else f"(kk + {dk}) * {rb} + {8 * j}")
                    w(f"    const uint b{j}_{r} = as_uint({rd}(bs[{at}]));")
            mmas()
            w("  }")

        def mmas():
            for i in range(mt):
                for j in range(nt_):
                    c = [f"acc[{i}][{j}][{e}]" for e in range(4)]
                    w(f'    asm("mma.sync.aligned.{shape} "')
                    w('        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, '
                      '{%10, %11, %12, %13};"')
                    w(f'        : "=f"({c[0]}), "=f"({c[1]}), "=f"({c[2]}), "=f"({c[3]})')
                    w(f'        : "r"(a{i}_0), "r"(a{i}_1), "r"(a{i}_2), "r"(a{i}_3), '
                      f'"r"(b{j}_0), "r"(b{j}_1),')
                    w(f'          "f"({c[0]}), "f"({c[1]}), "f"({c[2]}), "f"({c[3]}));')

        def slice16():
            """m16n8k16: register r of A holds rows g (+8) at k 2q, 2q+1 (+8); of B, k 2q,
            2q+1 (+8) at column g; each pair converted into one register as it is read."""
            if self.packed:
                return slice_packed()
            if self.a_mmajor:  # the pair is adjacent: one float2
                w(f"  __local const float* as = As + cur * {sza} + (wm0 + g) * {self.rak}"
                  " + 2 * q;")
            else:
                w(f"  __local const float* as = As + cur * {sza} + 2 * q * {ra} + wm0 + g;")
            w(f"  __local const float* bs = Bs + cur * {szb} + 2 * q * {rb} + wn0 + g;")
            w("#pragma unroll")
            w(f"  for (int kk = 0; kk < {t.bk}; kk += 16) {{")
            for i in range(mt):
                for r, (dk, dm) in enumerate(((0, 0), (0, 8), (8, 0), (8, 8))):
                    if self.a_mmajor:
                        w(f"    const float2 fa{i}_{r} = *(__local const float2*)(as + "
                          f"{16 * i + dm} * {self.rak} + kk + {dk});")
                        lo, hi = f"fa{i}_{r}.x", f"fa{i}_{r}.y"
                    else:
                        lo = f"as[(kk + {dk}) * {ra} + {16 * i + dm}]"
                        hi = f"as[(kk + {dk + 1}) * {ra} + {16 * i + dm}]"
                    w(f"    const uint a{i}_{r} = pd_pack({lo}, {hi});")
            for j in range(nt_):
                for r, dk in enumerate((0, 8)):
                    w(f"    const uint b{j}_{r} = pd_pack(bs[(kk + {dk}) * {rb} + {8 * j}], "
                      f"bs[(kk + {dk + 1}) * {rb} + {8 * j}]);")
            mmas()
            w("  }")

        def slice_packed():
            """The same registers read as stored: one 32-bit word each."""
            if self.a_mmajor:
                w(f"  __local const uint* as = As + cur * {sza} + (wm0 + g) * {self.rak} + q;")
            else:
                w(f"  __local const uint* as = As + cur * {sza} + q * {ra} + wm0 + g;")
            w(f"  __local const uint* bs = Bs + cur * {szb} + q * {rb} + wn0 + g;")
            w("#pragma unroll")
            w(f"  for (int kh = 0; kh < {t.bk // 2}; kh += 8) {{")
            for i in range(mt):
                for r, (dk, dm) in enumerate(((0, 0), (0, 8), (4, 0), (4, 8))):
                    at = (f"{16 * i + dm} * {self.rak} + kh + {dk}" if self.a_mmajor
                          else f"(kh + {dk}) * {ra} + {16 * i + dm}")
                    w(f"    const uint a{i}_{r} = as[{at}];")
            for j in range(nt_):
                for r, dk in enumerate((0, 4)):
                    w(f"    const uint b{j}_{r} = bs[(kh + {dk}) * {rb} + {8 * j}];")
            mmas()
            w("  }")

        if t.stages:
            self._pipeline_async(w, issue, slice_)
        else:
            self._pipeline(w, gload, sstore, sza, szb, slice_)
        if t.kslices > 1:
            self._slices_meet(w, (mt, nt_, 4))

        def colx(j, e):
            return f"(n0 + wn0 + {8 * j} + 2 * q + {e})"

        breg = {}
        if self.bias_per_column():
            breg = self.bias_loads(w, [colx(j, e) for j in range(nt_) for e in range(2)])
        for i in range(mt):
            for h in range(2):
                w("{")
                w(f"  const int row = m0 + wm0 + {16 * i + 8 * h} + g;")
                w(f"  if (row < {self.M}) {{")
                self._scatter_row(w)
                for j in range(nt_):
                    w(f"    const int col{j} = n0 + wn0 + {8 * j} + 2 * q;")
                    # a fragment's pair of columns as one float2 (col is even; with n and
                    # ldc multiples of 4 and C 16-byte aligned, both columns are inside
                    # or outside): half the store instructions, each lane's 8 bytes
                    # contiguous with its neighbours' (memory-bound products, short k)
                    self._store_c(w, vec_c, f"col{j}",
                                  [self._value(f"acc[{i}][{j}][{2 * h + e}]")
                                   for e in range(2)],
                                  [breg.get(colx(j, e)) for e in range(2)])
                w("  }")
                w("}")

    def _scatter_row(self, w) -> None:
        """``crow``: the storage row of C's row ``row`` where C's rows are scattered
        (``c_rows``: one phase of a strided backward data)."""
        if self.pr.c_rows is not None:
            hp, wp, rn, ra, rb = self.pr.c_rows
            w(f"    const int crow = row / {hp * wp} * {rn} + row / {wp} % {hp} * {ra}"
              f" + row % {wp} * {rb};")

    def _store_c(self, w, cond: str, col: str, vals: list, bias_regs: list) -> None:
        """Store ``vals`` at row ``row``, columns ``col`` + 0, 1, ...: as one float2 or
        float4 where ``cond`` holds (C 16-byte aligned; n and ldc multiples of 4, ``col`` of
        the vector's width), else element by element inside n; ``cond`` "0": never a vector.
        ``bias_regs``: per element, a register already holding its bias, or None."""
        pr, n = self.pr, len(vals)
        row = "row" if pr.c_rows is None else "crow"
        if cond != "0":
            w(f"    if ({cond} && {col} < {pr.n}) {{")
            w(f"      __global float{n}* cp = (__global float{n}*)(C + {row} * {pr.ldc}"
              f" + {col});")
            if self.reads_old:
                w(f"      const float{n} old = *cp;")
            parts = [self._final(v, f"old.{'xyzw'[e]}", f"{col} + {e}", bias_regs[e])
                     for e, v in enumerate(vals)]
            w(f"      *cp = (float{n})({', '.join(parts)});")
            w("    } else {")
        else:
            w("    {")
        for e, v in enumerate(vals):
            w(f"      if ({col} + {e} < {pr.n}) {{")
            w(f"        __global float* cp = C + {row} * {pr.ldc} + {col} + {e};")
            w(f"        *cp = {self._final(v, '*cp', f'{col} + {e}', bias_regs[e])};")
            w("      }")
        w("    }")

    def _sstore_packed(self, w, name, buf, loads, arr, row) -> None:
        """Store this work-item's float4s of ``name`` into the packed tile: pairs along k
        into one word; a float4 across columns (one k) as four 16-bit halves."""
        for i, (_, _, (r, c, transposed)) in enumerate(loads):
            v = f"r{name}[{i}]"
            if name == "a" and self.a_mmajor:  # (k column r, m row c): two pairs, one uint2
                w(f"*(__local uint2*)&As[{buf} + {c} * {self.rak} + ({r}) / 2] = "
                  f"(uint2)(pd_pack({v}.x, {v}.y), pd_pack({v}.z, {v}.w));")
            elif transposed:  # along k at column r... (k offset r, column c)
                w(f"{arr}[{buf} + (({r}) / 2) * {row} + {c}] = pd_pack({v}.x, {v}.y);")
                w(f"{arr}[{buf} + (({r}) / 2 + 1) * {row} + {c}] = pd_pack({v}.z, {v}.w);")
            else:  # k row r, columns c..c+3: the low or high half of four words
                w("{")
                w(f"  __local ushort* h = (__local ushort*){arr} + 2 * ({buf} + (({r}) / 2) * "
                  f"{row} + {c}) + (({r}) & 1);")
                for e, comp in enumerate("xyzw"):
                    w(f"  h[{2 * e}] = (ushort)pd_pack({v}.{comp}, 0.0f);")
                w("}")

    @property
    def reads_old(self) -> bool:
        """Whether the store reads C's previous content (beta or a sum post-op)."""
        from .post_ops import reads_prior

        return self.pr.beta != 0.0 or reads_prior(self.pr.post_ops)

    def bias_per_column(self) -> bool:
        """Whether the bias depends on C's column only (broadcast over rows): its values are
        then read once per column before the stores instead of once per element (the
        per-element loads cost 1024^3 60% on the H100)."""
        pr = self.pr
        if pr.bias is None:
            return False
        dims = pr.bias[1]
        return dims[-1 if pr.epi_swap else -2] == 1

    def bias_loads(self, w, cols) -> dict:
        """Registers holding the bias of each column expression in ``cols`` (clamped inside
        C, so that edge work-items read a valid element)."""
        from pymbolic import var

        from .reorder import _offset_expr

        pr = self.pr
        layout, dims, _ = pr.bias
        out = {}
        for i, c in enumerate(cols):
            pos = self._positions(var("pd_row0"), var("pd_col"))
            idx = _c_mapper()(_offset_expr(layout, [0 if d == 1 else e for d, e in zip(dims,
                                                                                      pos)]))
            idx = re.sub(r"\bpd_col\b", f"min({c}, {pr.n - 1})", idx)
            idx = re.sub(r"\bpd_row0\b", "0", idx)
            w(f"const float pbias{i} = bias[{idx}];")
            out[c] = f"pbias{i}"
        return out

    def _positions(self, row, c) -> list:
        """The destination position of C's element (``row``, ``c``) (pymbolic expressions)."""
        pr = self.pr
        pos = batch_position(pr.epi_fixed, pr.epi_batch, "bt")
        return pos + ([c, row] if pr.epi_swap else [row, c])

    def _final(self, v: str, old: str, col: str, bias_reg: str | None = None) -> str:
        """The value stored at (``row``, ``col``): ``alpha*acc + beta*old``, then the bias
        (``bias_reg``: a register already holding it) and the post-ops at the element's
        destination position."""
        pr = self.pr
        v = self._with_beta(v, old)
        if not has_epilogue(pr):
            return v
        from pymbolic import var

        from . import post_ops as po
        from .gemm import scale_product, scale_result
        from .reorder import _offset_expr

        pos = self._positions(var("row"), var("pd_col"))
        value = scale_product(pr, var("pd_v"), pos)
        if bias_reg is not None:
            value = value + var(bias_reg)
        elif pr.bias is not None:
            layout, dims, _ = pr.bias
            value = value + var("bias")[_offset_expr(
                layout, [0 if d == 1 else e for d, e in zip(dims, pos)])]
        value = scale_result(pr, po.apply(value, pr.post_ops, var("pd_old"), at=pos), pos)
        text = _c_mapper()(value)
        # one C expression: the names bound by substitution (each used in place)
        for name, repl in (("pd_v", f"({v})"), ("pd_old", f"({old})"), ("pd_col", f"({col})")):
            text = re.sub(rf"\b{name}\b", repl, text)
        return text

    def _value(self, acc: str) -> str:
        a = self.pr.alpha
        return acc if a == 1.0 else f"{_f(a)} * {acc}"

    def _with_beta(self, v: str, old: str) -> str:
        b = self.pr.beta
        if b == 0.0:
            return v
        return f"{v} + {old}" if b == 1.0 else f"fma({_f(b)}, {old}, {v})"

    def source(self, name: str) -> str:
        pr, t = self.pr, self.t
        rt = pr.runtime_offsets
        # c restrict too: else every store to C may alias the bias or a post-op operand, and
        # the compiler reloads them per element (a bias cost 1024^3 60% on the H100)
        args = ["__global const float* restrict a", "__global const float* restrict b",
                "__global float* restrict c"] + [f"__global const {_epilogue_ctype(pr, n)}* "
                                                 f"restrict {n}" for n in _epilogue_names(pr)]
        if t.kslices > 1:
            args += ["__global float* restrict ws"]
        if rt:
            args += ["long a_off", "long b_off", "long c_off"]
        if t.kslices > 1:  # the shares' tiles at ws_off, the blocks' counters at cnt_off
            args += ["long ws_off", "long cnt_off"]
        args += [f"long {n}" for n in _size_names(pr)]
        bt = "(long)get_group_id(2)" if pr.batch > 1 else None

        def base(w, const, stride):
            parts = [f"{w}_off"] if rt else []
            if const:
                parts.append(str(const))
            if bt is not None and stride:
                parts.append(f"{bt} * {stride}")
            return " + ".join(parts) or "0"

        # a gathered transposed A's batch entries are k slices of the same images
        a_stride = 0 if pr.a_conv is not None and pr.trans_a else pr.stride_a
        sza, szb = self.sza, self.szb
        stype = "uint" if self.packed else "float"
        vec = _vector_ops(pr)
        from .post_ops import helpers

        cvt = [_TF32_HELPERS] if t.mma == "tf32" else [_pack_helper(MMA_KINDS[t.mma][2])] \
            if t.mma else []
        if t.stages:
            cvt = cvt + [_CP_ASYNC_HELPERS]
        if t.ksplit > 1:  # each k-group its own double buffers
            ks = t.ksplit
            # one array: the k-groups' tiles are added through all of it
            head = [f"    __local float As_all[{2 * (sza + szb) * ks}] "
                    "__attribute__((aligned(16)));",
                    f"    __local float* Bs_all = As_all + {2 * sza * ks};",
                    f"    const int kg = get_local_id(0) / {self.nt};",
                    f"    const int tid = get_local_id(0) % {self.nt};",
                    f"    __local float* As = As_all + kg * {2 * sza};",
                    f"    __local float* Bs = Bs_all + kg * {2 * szb};"]
        else:
            nb = _buffers(t)
            head = [f"    __local {stype} As[{nb * sza}] __attribute__((aligned(16)));",
                    f"    __local {stype} Bs[{nb * szb}] __attribute__((aligned(16)));",
                    "    const int tid = get_local_id(0);"]
        if t.kslices > 1:
            head = head + ["    __local int pd_last;"]
        lines = cvt + [h[1] for h in helpers(pr.post_ops)] + [
            f"__kernel void __attribute__((reqd_work_group_size({t.threads}, 1, 1)))",
            f"{name}({', '.join(args)})",
            "{",
        ] + head + (["    const int M = (int)m;"] if pr.runtime_m else []) + (
            ["    const int K = (int)ksize;"] if pr.runtime_k else []) + [
            f"    const int tx = tid % {self.wx}, ty = tid / {self.wx};",
            f"    const int n0 = get_group_id(0) * {t.bn}, m0 = get_group_id(1) * {t.bm};",
            f"    const long ao = {base('a', pr.a_offset, a_stride)};",
            f"    const long bo = {base('b', pr.b_offset, pr.stride_b)};",
            f"    const long co = {base('c', pr.c_offset, pr.stride_c)};",
            "    __global const float* A = a + ao;",
            "    __global const float* B = b + bo;",
            "    __global float* C = c + co;",
        ]
        if pr.epi_fixed is None and pr.epi_batch and has_epilogue(pr):
            lines.append(f"    const long bt = {bt or 0};")
        if self.aligned:  # the caller guarantees the offsets: no test at all (15% faster)
            lines.append(self.body({w: "1" if vec[w] else "0" for w in "abc"}))
        else:
            for w in "abc":
                if vec[w]:
                    lines.append(f"    const bool {w}vec = ({w}o & 3) == 0;")
            lines.append(self.body({w: f"{w}vec" if vec[w] else "0" for w in "abc"}))
        lines.append("}")
        return "\n".join(lines) + "\n"


# cp.async from global into shared memory: 16 bytes (both addresses 16-byte aligned, L1
# bypassed) or a float4 as four 4-byte copies; the shared address is the 32-bit offset a
# __local pointer holds
_CP_ASYNC_HELPERS = """inline void pd_cp16(__local float* s, __global const float* g)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                 :: "r"((uint)(size_t)s), "l"(g) : "memory");
}
inline void pd_cp4x4(__local float* s, __global const float* g)
{
    for (int e = 0; e < 4; ++e)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;"
                     :: "r"((uint)(size_t)(s + e)), "l"(g + e) : "memory");
}
inline void pd_cp16z(__local float* s, __global const float* g, bool in)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"((uint)(size_t)s), "l"(g), "r"(in ? 16u : 0u) : "memory");
}
inline void pd_cp4x4z(__local float* s, __global const float* g, bool in)
{
    for (int e = 0; e < 4; ++e)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                     :: "r"((uint)(size_t)(s + e)), "l"(g + e), "r"(in ? 4u : 0u) : "memory");
}
"""

# round to TF32 (nearest, ties away) once per element, as the tensor cores read it
_TF32_HELPERS = """inline float pd_tf32(float x)
{
    uint r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return as_float(r);
}
inline float4 pd_tf324(float4 v)
{
    return (float4)(pd_tf32(v.x), pd_tf32(v.y), pd_tf32(v.z), pd_tf32(v.w));
}
"""


def blocks(pr: GemmProblem, tile: NvTile) -> int:
    """Blocks of C (work-groups per k share) of ``pr`` with ``tile``, per batch entry."""
    return -(-pr.m // tile.bm) * -(-pr.n // tile.bn)


def workspace(pr: GemmProblem, tile: NvTile) -> int:
    """Floats of workspace a ``kslices`` kernel needs for ``pr.m`` rows or fewer (0 for the
    others): every block's share tiles (at ``ws_off``), then one int32 arrival counter per
    block (at ``cnt_off``, :func:`counters_at` floats further). The counters must be zero
    before the first launch; each launch leaves them zero."""
    if tile.kslices <= 1:
        return 0
    return counters_at(pr, tile) + blocks(pr, tile)


def counters_at(pr: GemmProblem, tile: NvTile) -> int:
    """Floats from the shares' tiles to the counters in a ``kslices`` workspace."""
    return blocks(pr, tile) * tile.kslices * tile.bm * tile.bn


def _pack_helper(instr: str) -> str:
    """``pd_pack(lo, hi)``: two floats rounded (nearest even) into one register of two
    16-bit values, ``lo`` (the smaller k) in the low half, as mma.sync reads a pair."""
    return f"""inline uint pd_pack(float lo, float hi)
{{
    uint r;
    asm("{instr} %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}}
"""


def _pads(tile: NvTile) -> tuple[int, int]:
    """Row padding of the shared tiles: (k-major rows, the m-major A's rows beyond bk).

    SIMT: 4. TF32 fragments read rows q (k) at columns g (m or n): a pad of 8 puts a warp's
    32 reads in 32 banks; an m-major A's rows of bk + 4 likewise. The 16-bit kinds read rows
    2q and 2q + 1: rows of bm + 4 (bm a multiple of 16) put rows 2q in banks 8q apart; an
    m-major A is read as float2 pairs, each half-warp's rows g*(bk + 8) in banks 8 apart."""
    if tile.mma == "tf32":
        return 8, 4
    if tile.mma:
        return 4, 8
    return 4, 4


def _packed_pads() -> tuple[int, int]:
    """Padding of packed tiles (in words): k-pair rows of span + 8 put a fragment's reads
    (rows q, columns g) in 32 banks; an m-major A's rows of bk/2 + 4 likewise (rows g,
    words q)."""
    return 8, 4


def _smem_floats(tile: NvTile) -> int:
    """Floats of one k-group's shared buffers (SIMT)."""
    pad, _ = _pads(tile)
    return 2 * (tile.bk * (tile.bm + pad) + tile.bk * (tile.bn + pad))


def smem_bytes(tile: NvTile) -> int:
    """Shared memory of a kernel with ``tile`` (double-buffered A and B; the larger of the two
    A layouts, so that the bound holds for every problem; each k-group its own)."""
    if tile.ksplit > 1:
        return _smem_floats(tile) * tile.ksplit * 4
    if tile.packed:
        pad, apad = _packed_pads()
        kp = tile.bk // 2
        a = max(kp * (tile.bm + pad), tile.bm * (kp + apad))
        return 2 * (a + kp * (tile.bn + pad)) * 4
    pad, apad = _pads(tile)
    a = max(tile.bk * (tile.bm + pad), tile.bm * (tile.bk + apad) if tile.mma else 0)
    b = max(tile.bk * (tile.bn + pad), tile.bn * (tile.bk + apad) if tile.stages else 0)
    return _buffers(tile) * (a + b) * 4


def _buffers(tile: NvTile) -> int:
    """Slices of A and B held in shared memory at once."""
    return max(2, tile.stages)


def _epilogue_names(pr: GemmProblem) -> tuple[str, ...]:
    """The epilogue's operand arguments (after ``a, b, c``): ``bias``, then ``po<i>_src1``,
    then the scales (``src_scale``, ``wei_scale``, ``dst_scale``)."""
    from .post_ops import arg_specs

    return (("bias",) if pr.bias is not None else ()) + tuple(
        spec[0] for spec in arg_specs(pr.post_ops)) + scale_names(pr)


def _epilogue_ctype(pr: GemmProblem, name: str) -> str:
    """The C element type of epilogue operand ``name``: float, or a post-op operand's own
    (:func:`pydnnl.kernels.post_ops.src1_c_type`)."""
    from .post_ops import src1_c_type, src1_name

    for i, op in enumerate(pr.post_ops):
        if op[0] == "binary" and src1_name(i) == name:
            return src1_c_type(op)
    return "float"


def _minus(size: str, d: int) -> str:
    """``size - d`` as C: folded where ``size`` is a constant."""
    return str(int(size) - d) if size.isdigit() else f"{size} - {d}"


def _size_names(pr: GemmProblem) -> tuple[str, ...]:
    """The run-time size arguments (after the offsets): ``m``, then ``ksize``."""
    return (("m",) if pr.runtime_m else ()) + (("ksize",) if pr.runtime_k else ())


def aligned_offsets(pr: GemmProblem, a_off: int = 0, b_off: int = 0, c_off: int = 0) -> bool:
    """Whether a kernel built with ``aligned=True`` may run ``pr`` with these run-time
    offsets: every operand it reads or writes as float4s starts at a multiple of 4 elements
    in every batch entry (the others are read element-wise either way)."""
    for w, off, const, stride in (("a", a_off, pr.a_offset, pr.stride_a),
                                  ("b", b_off, pr.b_offset, pr.stride_b),
                                  ("c", c_off, pr.c_offset, pr.stride_c)):
        if _vector_ops(pr)[w] and ((off + const) % 4 or (pr.batch > 1 and stride % 4)):
            return False
    return True


def _vector_ops(pr: GemmProblem) -> dict:
    # float4 accesses need the operand's leading dimension (and for C, n) a multiple of 4
    return {"a": pr.lda % 4 == 0, "b": pr.ldb % 4 == 0, "c": pr.n % 4 == 0 and pr.ldc % 4 == 0}


def build_gemm_nv(pr: GemmProblem, tile: NvTile, aligned: bool = False) -> KernelSource:
    """The kernel ``gemm_nv`` computing ``pr`` with ``tile``: arguments ``a, b, c`` (flat float
    buffers) and, with ``pr.runtime_offsets``, ``a_off, b_off, c_off`` (int64 elements); one
    work-group per ``bm x bn`` block of C (grid axis 0 along n, 1 along m, 2 the batch).

    ``aligned``: the caller launches it only where :func:`aligned_offsets` holds, and every
    float4 access goes unconditionally; otherwise each work-group tests its offsets and reads
    misaligned operands element-wise (a test per access: the loop as two copies under one
    branch made PoCL store into C's padding)."""
    tile.check()
    if not supports(pr, tile):
        raise ValueError(f"build_gemm_nv: {pr!r} is not covered with {tile} (see supports())")
    g = _Gen(pr, tile, aligned)
    name = "gemm_nv"
    gsize = (-(-pr.n // tile.bn) * tile.threads, -(-pr.m // tile.bm))
    lsize = (tile.threads, 1)
    if pr.batch > 1:
        gsize, lsize = gsize + (pr.batch,), lsize + (1,)
    if tile.kslices > 1:  # axis 2: the block's k shares
        gsize, lsize = gsize + (tile.kslices,), lsize + (1,)
    ws = ("ws",) if tile.kslices > 1 else ()
    names = ("a", "b", "c") + _epilogue_names(pr) + ws + (
        ("a_off", "b_off", "c_off") if pr.runtime_offsets else ()) + (
        ("ws_off", "cnt_off") if ws else ()) + _size_names(pr)
    opts = ("-cl-nv-maxrregcount=%d" % tile.maxrreg,) if tile.maxrreg else ()
    if pr.runtime_m:  # one work-group row per bm rows of the m given at launch
        grid = (str(gsize[0]), f"(m + {tile.bm - 1}) // {tile.bm}") + tuple(
            str(x) for x in gsize[2:])
        return KernelSource(name, g.source(name), None, lsize, names, opts, grid=grid)
    return KernelSource(name, g.source(name), gsize, lsize, names, opts)
