"""How a convolution problem's tensors look to a GEMM: matrix views of activation and
weights layouts (the problem itself is :class:`pydnnl.conv_shapes.ConvProblem`)."""
from __future__ import annotations

from dataclasses import dataclass

from ...kernels.conv_common import plain_strides, prod


def flat_stride(strides, sizes) -> int | None:
    """The innermost stride when dims ``sizes`` with ``strides`` flatten row-major, else None.

    Dimensions of size 1 are ignored. All of size 1: 1.
    """
    dims = [(s, n) for s, n in zip(strides, sizes) if n != 1]
    if not dims:
        return 1
    inner = dims[-1][0]
    expect = inner * dims[-1][1]
    for s, n in reversed(dims[:-1]):
        if s != expect:
            return None
        expect = s * n
    return inner


@dataclass(frozen=True)
class ActMatrix:
    """How an activation ``[N, C, sp...]`` looks to a GEMM.

    ``mode`` ``hwc``: per image a ``[P, C]`` row-major matrix with row stride ``ld`` (channel
    stride 1); ``fold``: images follow each other with stride ``P * ld``, so a chunk of
    images is one ``[nb * P, C]`` matrix. ``chw``: per image a ``[C, P]`` matrix with row
    stride ``ld`` (points contiguous). ``sn``: image stride; ``off0``: storage offset.
    """

    mode: str
    ld: int
    sn: int
    off0: int
    fold: bool

    def offset(self, n: int, c: int) -> int:
        """Element offset of image ``n``, channel ``c``, point 0."""
        return self.off0 + n * self.sn + c * (1 if self.mode == "hwc" else self.ld)


def act_matrix(layout: tuple, mb: int, channels: int, sp: tuple, mode: str) -> ActMatrix | None:
    """The GEMM view ``mode`` (``hwc`` or ``chw``) of an activation layout, or None."""
    st = plain_strides(layout)
    if st is None:
        return None
    off0 = layout[0]
    sn, sc, ssp = st[0], st[1], st[2:]
    P = prod(sp)
    if mode == "hwc":
        if channels > 1 and sc != 1:
            return None
        sp_stride = flat_stride(ssp, sp)
        if sp_stride is None or (P > 1 and sp_stride < channels):
            return None
        ld = sp_stride if P > 1 else max(channels, 1)
        return ActMatrix("hwc", ld, sn, off0, mb == 1 or sn == P * ld)
    sp_stride = flat_stride(ssp, sp)
    if sp_stride != 1 and P > 1:
        return None
    if channels > 1 and sc < P:
        return None
    ld = sc if channels > 1 else P
    return ActMatrix("chw", ld, sn, off0, False)


@dataclass(frozen=True)
class WeiMatrix:
    """Grouped weights ``[G, OCg, ICg, k...]`` seen by a GEMM per group.

    ``form`` ``ok``: ``[OCg, Kf]`` row-major with row stride ``ld``; ``ko``: ``[Kf, OCg]``
    row-major with row stride ``ld``. ``kf_order`` ``ick`` (ic major, taps minor) or ``kic``
    (taps major, ic minor) says how the ``Kf = ICg * K`` index runs. ``sg``: group stride.
    """

    form: str
    kf_order: str
    ld: int
    sg: int
    off0: int

    def offset(self, g: int) -> int:
        return self.off0 + g * self.sg


def wei_matrix(layout: tuple, ocg: int, icg: int, kernel: tuple) -> WeiMatrix | None:
    st = plain_strides(layout)
    if st is None:
        return None
    sg, so, si, sk = st[0], st[1], st[2], st[3:]
    best = None
    for order in ("ick", "kic"):
        if order == "ick":
            s = flat_stride((si, *sk), (icg, *kernel))
        else:
            s = flat_stride((*sk, si), (*kernel, icg))
        if s is None:
            continue
        kf = icg * prod(kernel)
        if s == 1 and (ocg == 1 or so >= kf):
            best = WeiMatrix("ok", order, so if ocg > 1 else kf, sg, layout[0])
        elif (so == 1 or ocg == 1) and (kf == 1 or s >= ocg):
            best = WeiMatrix("ko", order, s if kf > 1 else ocg, sg, layout[0])
        if best is not None:
            return best
    return None


def dense_layout(sizes, order) -> tuple:
    """A layout tuple (offset 0) of dims ``sizes`` stored densely in ``order`` (outer first)."""
    strides = [0] * len(sizes)
    s = 1
    for d in reversed(order):
        strides[d] = s
        s *= sizes[d]
    return (0, tuple((1, strides[d], ()) for d in range(len(sizes))))


def with_offset(layout: tuple, off: int) -> tuple:
    return (layout[0] + off, layout[1])


def panel_layout(ocg: int, icg: int, kernel: tuple, width: int, off0: int = 0) -> tuple:
    """Layout of grouped weights ``[1, OCg, ICg, k...]`` stored as a channels-last forward
    GEMM's packed B (``[Kf, OCg]``, ``Kf`` in ``kic`` order) in panels of ``width`` columns:
    ``[OCg / width][k...][ICg][width]``, the output channels padded to a multiple of
    ``width`` (the memory desc tag ``A<k...>b<width>a`` of non-grouped weights)."""
    ks: list = []
    s = icg * width
    for kd in reversed(kernel):
        ks.insert(0, (1, s, ()))
        s *= kd
    kf = icg * prod(kernel)
    return (off0, ((1, 0, ()), (width, kf * width, ((width, 1, 1),)), (1, width, ()), *ks))


def panel_width_of(layout: tuple, ocg: int, icg: int, kernel: tuple) -> int | None:
    """The panel width when ``layout`` (grouped weights, one group) is :func:`panel_layout`
    of some width, else None."""
    per = layout[1]
    if len(per) != 3 + len(kernel) or per[0] != (1, 0, ()) or per[1][0] <= 1:
        return None
    w = per[1][0]
    return w if layout == panel_layout(ocg, icg, kernel, w, layout[0]) else None


def panel_tag(nsp: int, width: int) -> str:
    """The memory desc tag of :func:`panel_layout` for non-grouped weights
    ``[OC, IC, k...]`` with ``nsp`` spatial dims."""
    return "A" + "cdefgh"[:nsp] + "b" + f"{width}a"

