"""Loopy generator of the optimizer-update kernels (pydnnl's ``sgd_update`` and ``adam_update``
extension primitives): one fused elementwise pass per parameter tensor that reads the
parameter, its gradient and the optimizer state, and writes the new parameter and state in
place.

Rules (PyTorch's ``torch.optim.SGD`` and ``torch.optim.Adam`` with their defaults otherwise),
``g = grad + wd * param`` when weight decay is on:

- **sgd**: ``param -= lr * g``; with momentum ``vel = mu * vel + g`` and ``param -= lr * vel``
  (Nesterov: ``param -= lr * (g + mu * vel)``).
- **adam**: ``m = b1 * m + (1 - b1) * g``, ``v = b2 * v + (1 - b2) * g * g``,
  ``param -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`` with ``t`` read from a
  one-element f32 buffer (the step count, 1 at the first update).

The hyper-parameters are scalar kernel arguments, so one compiled program serves every value
(a learning-rate schedule recreates primitives without compiling). Every buffer is f32 and
is addressed through :func:`~pydnnl.kernels.reorder.layout_of` tuples: a flat problem has one
dimension and dense 1-D layouts, a strided one any layouts (block padding untouched). Pure:
no engine, no argument maps.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .reorder import _offset_expr

SGD, ADAM = "sgd", "adam"

# 1 - beta^t from 1 - beta (given exactly by the host): -expm1(t * log1p(-(1 - beta))) loses
# nothing to cancellation when beta is near 1 (beta2 = 0.999: 1 - beta2 in f32 arithmetic
# would be off by 1e-5 relative)
_BIAS_CORRECTION = (
    "pd_adam_bias_correction",
    "static inline float pd_adam_bias_correction(float one_minus_beta, float t) "
    "{ return -expm1(t * log1p(-one_minus_beta)); }",
    (np.float32, np.float32), np.float32)


@dataclass(frozen=True)
class OptimizerUpdate:
    """One parameter tensor's update over logical ``dims``.

    ``layouts`` and ``sizes`` (storage elements) list the buffers of :func:`buffer_names` in
    order (adam's one-element ``step`` has a size, no layout); ``momentum`` (sgd) adds the
    velocity buffer, ``nesterov`` its look-ahead form, ``decay`` the weight-decay term.
    ``wg``: work-items of a work-group along the dimension :func:`local_dim` picks."""

    rule: str
    dims: tuple[int, ...]
    layouts: tuple
    sizes: tuple[int, ...]
    momentum: bool = False
    nesterov: bool = False
    decay: bool = False
    wg: int = 256


def buffer_names(p: OptimizerUpdate) -> tuple[str, ...]:
    """The kernel's buffer arguments, in order (``param`` is read and written)."""
    if p.rule == ADAM:
        return ("param", "grad", "m", "v", "step")
    return ("param", "grad", "vel") if p.momentum else ("param", "grad")


def scalar_names(p: OptimizerUpdate) -> tuple[str, ...]:
    """The kernel's f32 hyper-parameter arguments, in order."""
    names = ("lr", "beta1", "beta2", "one_minus_beta1", "one_minus_beta2", "eps") \
        if p.rule == ADAM else \
        (("lr", "mu") if p.momentum else ("lr",))
    return names + (("wd",) if p.decay else ())


def kernel_name(p: OptimizerUpdate) -> str:
    return f"pydnnl_{p.rule}_update"


def local_dim(p: OptimizerUpdate) -> int:
    """The dim with the smallest parameter stride: neighbouring work-items touch neighbouring
    elements."""
    best, best_stride = len(p.dims) - 1, None
    for d, (_blk, stride, inner) in enumerate(p.layouts[0][1]):
        if p.dims[d] == 1:
            continue
        s = min([t[2] for t in inner] + [stride])
        if best_stride is None or s < best_stride:
            best, best_stride = d, s
    return best


def build(p: OptimizerUpdate):
    """loopy TranslationUnit with arguments ``buffer_names(p) + scalar_names(p)``."""
    import loopy as lp
    from pymbolic import var

    if p.rule not in (SGD, ADAM):
        raise ValueError(f"optimizer kernel: rule must be {SGD!r} or {ADAM!r}, got {p.rule!r}")
    names = buffer_names(p)
    if len(p.layouts) != len(names) - (p.rule == ADAM) or len(p.sizes) != len(names):
        raise ValueError(f"optimizer kernel: {len(p.layouts)} layouts and {len(p.sizes)} sizes "
                         f"for buffers {names}")
    nd = len(p.dims)
    inames = [f"i{d}" for d in range(nd)]
    idx = [var(n) for n in inames]
    domain = "{[" + ",".join(inames) + "]: " + " and ".join(
        f"0 <= {n} < {v}" for n, v in zip(inames, p.dims)) + "}"
    within = frozenset(inames)

    def at(k):
        return var(names[k])[_offset_expr(p.layouts[k], idx)]

    temps, insns = [], []

    def let(name, expr):
        """A private f32 temporary assigned ``expr`` after the previous instruction."""
        temps.append(lp.TemporaryVariable(name, np.float32, shape=(),
                                          address_space=lp.AddressSpace.PRIVATE))
        insns.append(lp.Assignment(var(name), expr, id=f"t_{name}", within_inames=within))
        return var(name)

    lr = var("lr")
    p0 = let("p0", at(0))
    g = let("g", at(1) + var("wd") * p0 if p.decay else at(1))
    stores = []
    if p.rule == ADAM:
        b1, b2 = var("beta1"), var("beta2")
        m1 = let("m1", b1 * at(2) + var("one_minus_beta1") * g)
        v1 = let("v1", b2 * at(3) + var("one_minus_beta2") * g * g)
        t = let("t", var("step")[0])
        c1 = let("c1", var(_BIAS_CORRECTION[0])(var("one_minus_beta1"), t))
        c2 = let("c2", var(_BIAS_CORRECTION[0])(var("one_minus_beta2"), t))
        new = p0 - (lr / c1) * m1 / (var("sqrt")(v1) / var("sqrt")(c2) + var("eps"))
        stores += [(2, m1), (3, v1)]
    elif p.momentum:
        v1 = let("v1", var("mu") * at(2) + g)
        new = p0 - lr * (g + var("mu") * v1 if p.nesterov else v1)
        stores.append((2, v1))
    else:
        new = p0 - lr * g
    stores.append((0, new))
    for k, expr in stores:
        insns.append(lp.Assignment(at(k), expr, id=f"s_{names[k]}", within_inames=within))
    # one chain: each instruction after the one before (the stores write what the loads read)
    chained = [i.copy(depends_on=frozenset([prev.id] if prev else []), depends_on_is_final=True)
               for prev, i in zip([None] + insns, insns)]
    # every work-item touches only its own element: no barrier is ever needed
    nosync = frozenset((i.id, "any") for i in chained)
    chained = [i.copy(no_sync_with=nosync) for i in chained]

    args = []
    for k, n in enumerate(names):
        written = n in ("param", "vel", "m", "v")
        args.append(lp.GlobalArg(n, np.float32, shape=(int(p.sizes[k]),), is_output=written,
                                 is_input=True))
    args += [lp.ValueArg(n, np.float32) for n in scalar_names(p)]
    knl = lp.make_kernel(domain, chained, args + temps, name=kernel_name(p),
                         lang_version=(2018, 2), target=lp.PyOpenCLTarget(),
                         seq_dependencies=False)
    ld = local_dim(p)
    others = sorted((d for d in range(nd) if d != ld), key=lambda d: -p.dims[d])
    wg = max(1, min(p.wg, p.dims[ld]))
    knl = lp.split_iname(knl, inames[ld], wg, inner_tag="l.0", outer_tag="g.0")
    # at most three grid axes: the two largest other dims get one each, the rest loop
    knl = lp.tag_inames(knl, {inames[d]: f"g.{1 + k}" for k, d in enumerate(others[:2])})
    if p.rule == ADAM:
        from .clhelpers import register_helpers

        knl = register_helpers(knl, [_BIAS_CORRECTION])
    return knl
