"""Plain numpy reference of oneDNN's convolution and deconvolution (forward, backward data,
backward weights) for 1-D, 2-D and 3-D problems, plus forward post-ops.

Written from oneDNN's definitions; used by the tests and by benchdnn's correctness mode.

Conventions (oneDNN's, all tensors in logical dim order whatever their memory format):

================  ===============================  ==============================================
tensor            dims                             notes
================  ===============================  ==============================================
src               [N, IC, (D,) (H,) W]             ncw / nchw / ncdhw
weights           [OC, IC/G, k...]                 ``groups`` gives G (default 1)
                  [G, OC/G, IC/G, k...]            a rank of src rank + 1 means groups (goihw)
bias              [OC] or None
dst               [N, OC, out...]
================  ===============================  ==============================================

* **Dilation** counts from 0 (oneDNN): ``dilates = 0`` is a dense kernel; the kernel covers
  ``(k - 1) * (d + 1) + 1`` input points. ONNX / MIOpen / PyTorch dilation ``D`` is ``D - 1``.
* **Padding** is asymmetric: ``padding_l`` / ``padding_r`` per spatial dim (``padding_r``
  defaults to ``padding_l``). Either may be negative (oneDNN allows it; benchdnn derives a
  negative right padding for e.g. 1x1 stride-2 layers of even size), which crops the input.
* **Convolution** (cross-correlation, no kernel flip)::

      dst[n, g*OCg + oc, o] = bias[g*OCg + oc]
          + sum_{ic, k} src[n, g*ICg + ic, o*s - pl + k*(d+1)] * wei[g, oc, ic, k]

  with ``out = (in - ((k-1)*(d+1)+1) + pl + pr) // s + 1``.
* **Deconvolution** (transposed convolution) keeps oneDNN's weights order: logical weights are
  **[OC, IC, k...]** or grouped **[G, OC/G, IC/G, k...]**, OC being the deconvolution's output
  (dst) channels. Deconvolution forward is convolution backward-data with the roles of IC and
  OC swapped::

      dst[n, g*OCg + oc, i*s - pl + k*(d+1)] += src[n, g*ICg + ic, i] * wei[g, oc, ic, k]

  with ``out = (in - 1) * s + ((k-1)*(d+1)+1) - pl - pr``. ONNX ``ConvTranspose``, MIOpen's
  transpose mode and PyTorch ``ConvTranspose`` store weights as **[IC, OC/G, k...]** instead;
  :func:`deconv_weights_from_io` converts (per group: swap the first two dims). Their
  ``output_padding`` is a smaller ``padding_r`` here (``padding_r = pads_end - output_padding``).

All functions accept any numeric arrays; they compute in float32 unless an input is float64 or
an integer type (then float64), or in ``dtype`` when given. Bad shapes raise
:class:`pydnnl.error.invalid_arguments` (a ``ValueError``) naming the dims.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..conv_shapes import ConvGeometry, validate_conv
from ..error import invalid_arguments

__all__ = [
    "conv_forward",
    "conv_backward_data",
    "conv_backward_weights",
    "deconv_forward",
    "deconv_backward_data",
    "deconv_backward_weights",
    "deconv_weights_from_io",
    "deconv_weights_to_io",
    "apply_post_ops",
    "eltwise",
]


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def _acc_dtype(dtype: Any, *arrays: np.ndarray | None) -> np.dtype:
    if dtype is not None:
        return np.dtype(dtype)
    for a in arrays:
        if a is None:
            continue
        if a.dtype == np.float64 or not np.issubdtype(a.dtype, np.floating):
            return np.dtype(np.float64)
    return np.dtype(np.float32)


def _as_array(name: str, a: Any, op: str) -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise invalid_arguments(f"{op}: {name} must be a numeric array, got dtype {arr.dtype}")
    return arr


def _grouped(weights: np.ndarray, geom: ConvGeometry, oc: int, ic: int) -> np.ndarray:
    """Weights as [G, oc/G, ic/G, k...] (oc, ic: the first two logical channel totals)."""
    if geom.grouped_weights:
        return weights
    g = geom.groups
    return weights.reshape(g, oc // g, ic // g, *weights.shape[2:])


def _pad_or_crop(x: np.ndarray, pl: Sequence[int], pr: Sequence[int]) -> np.ndarray:
    """Zero-pad (positive) or crop (negative) the trailing len(pl) axes of x."""
    nsp = len(pl)
    lead = x.ndim - nsp
    if any(p > 0 for p in (*pl, *pr)):
        x = np.pad(x, [(0, 0)] * lead + [(max(a, 0), max(b, 0)) for a, b in zip(pl, pr)])
    if any(p < 0 for p in (*pl, *pr)):
        sl = [slice(None)] * lead + [slice(max(-a, 0), x.shape[lead + i] - max(-b, 0))
                                     for i, (a, b) in enumerate(zip(pl, pr))]
        x = x[tuple(sl)]
    return x


def _taps(geom: ConvGeometry):
    """(kernel index tuple, slices into the padded input that this tap reads for every output)."""
    for tap in itertools.product(*(range(k) for k in geom.kernel)):
        sl = tuple(slice(t * (d + 1), t * (d + 1) + (o - 1) * s + 1, s)
                   for t, d, o, s in zip(tap, geom.dilates, geom.dst_spatial, geom.strides))
        yield tap, sl


def _conv_geom(src_shape, weights_shape, strides, dilates, padding_l, padding_r, groups, op,
               dst_shape=None, bias_shape=None) -> ConvGeometry:
    return validate_conv(src_shape, weights_shape, strides, dilates, padding_l, padding_r,
                         groups=groups, dst_dims=dst_shape, bias_dims=bias_shape, op=op)


# Core kernels on a convolution geometry, weights grouped [G, OCg, ICg, k...].
def _fwd(x: np.ndarray, wg: np.ndarray, geom: ConvGeometry, acc) -> np.ndarray:
    n, g = geom.mb, geom.groups
    icg, ocg = geom.icg, geom.ocg
    p = int(np.prod(geom.dst_spatial))
    xp = _pad_or_crop(x.astype(acc, copy=False), geom.padding_l, geom.padding_r)
    xp = xp.reshape(n, g, icg, *xp.shape[2:])
    wg = wg.astype(acc, copy=False)
    y = np.zeros((n, g, ocg, p), acc)
    for tap, sl in _taps(geom):
        xs = xp[(slice(None),) * 3 + sl].reshape(n, g, icg, p)
        y += np.matmul(wg[(slice(None),) * 3 + tap], xs)          # [G,OCg,ICg] @ [N,G,ICg,P]
    return y.reshape(n, geom.oc, *geom.dst_spatial)


def _bwd_data(dy: np.ndarray, wg: np.ndarray, geom: ConvGeometry, acc) -> np.ndarray:
    n, g = geom.mb, geom.groups
    icg, ocg = geom.icg, geom.ocg
    p = int(np.prod(geom.dst_spatial))
    span = tuple(i + a + b for i, a, b in zip(geom.src_spatial, geom.padding_l, geom.padding_r))
    dxp = np.zeros((n, g, icg, *span), acc)
    dyg = dy.astype(acc, copy=False).reshape(n, g, ocg, p)
    wt = np.swapaxes(wg.astype(acc, copy=False), 1, 2)              # [G, ICg, OCg, k...]
    for tap, sl in _taps(geom):
        contrib = np.matmul(wt[(slice(None),) * 3 + tap], dyg)     # [N, G, ICg, P]
        dxp[(slice(None),) * 3 + sl] += contrib.reshape(n, g, icg, *geom.dst_spatial)
    dxp = dxp.reshape(n, geom.ic, *span)
    return _pad_or_crop(dxp, tuple(-a for a in geom.padding_l), tuple(-b for b in geom.padding_r))


def _bwd_weights(x: np.ndarray, dy: np.ndarray, geom: ConvGeometry, acc) -> np.ndarray:
    n, g = geom.mb, geom.groups
    icg, ocg = geom.icg, geom.ocg
    p = int(np.prod(geom.dst_spatial))
    xp = _pad_or_crop(x.astype(acc, copy=False), geom.padding_l, geom.padding_r)
    xp = xp.reshape(n, g, icg, *xp.shape[2:])
    dyg = dy.astype(acc, copy=False).reshape(n, g, ocg, p).transpose(1, 2, 0, 3)
    dyg = dyg.reshape(g, ocg, n * p)
    dw = np.zeros((g, ocg, icg, *geom.kernel), acc)
    for tap, sl in _taps(geom):
        xs = xp[(slice(None),) * 3 + sl].reshape(n, g, icg, p).transpose(1, 0, 3, 2)
        dw[(slice(None),) * 3 + tap] = np.matmul(dyg, xs.reshape(g, n * p, icg))
    return dw


def _add_bias(y: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    if bias is not None:
        y += bias.astype(y.dtype, copy=False).reshape(1, -1, *([1] * (y.ndim - 2)))
    return y


def _check_bias(bias: Any, oc: int, op: str) -> np.ndarray | None:
    if bias is None:
        return None
    b = _as_array("bias", bias, op)
    if b.shape != (oc,):
        raise invalid_arguments(f"{op}: bias dims must be [OC] = [{oc}], got {list(b.shape)}")
    return b


def _deconv_geom(src_shape, weights_shape, strides, dilates, padding_l, padding_r, groups, op,
                 dst_shape=None) -> tuple[ConvGeometry, ConvGeometry]:
    gd = validate_conv(src_shape, weights_shape, strides, dilates, padding_l, padding_r,
                       groups=groups, deconvolution=True, op=op)
    if dst_shape is not None:
        dst = tuple(int(v) for v in dst_shape)
        if dst != gd.dst_dims():
            raise invalid_arguments(
                f"{op}: dst dims {list(dst)} do not match the {list(gd.dst_dims())} that src "
                f"{list(src_shape)}, weights {list(weights_shape)}, strides {list(gd.strides)}, "
                f"dilates {list(gd.dilates)}, padding_l {list(gd.padding_l)} and padding_r "
                f"{list(gd.padding_r)} give (out = (in-1)*s + (k-1)*(d+1)+1 - pl - pr)")
    return gd, gd.as_convolution()


def _deconv_w_to_conv(weights: np.ndarray, gd: ConvGeometry) -> np.ndarray:
    """oneDNN deconv weights [G, OCg, ICg, k] -> the equivalent conv's weights [G, ICg, OCg, k]."""
    return np.swapaxes(_grouped(weights, gd, gd.oc, gd.ic), 1, 2)


# --------------------------------------------------------------------------------------------
# convolution
# --------------------------------------------------------------------------------------------
def conv_forward(src: Any, weights: Any, bias: Any = None, strides: Any = None,
                 dilates: Any = None, padding_l: Any = None, padding_r: Any = None,
                 groups: int | None = None, *, dtype: Any = None) -> np.ndarray:
    """dst [N, OC, out...] of a oneDNN convolution (see the module docstring for conventions)."""
    op = "conv_forward"
    x = _as_array("src", src, op)
    w = _as_array("weights", weights, op)
    geom = _conv_geom(x.shape, w.shape, strides, dilates, padding_l, padding_r, groups, op)
    b = _check_bias(bias, geom.oc, op)
    acc = _acc_dtype(dtype, x, w, b)
    y = _fwd(x, _grouped(w, geom, geom.oc, geom.ic), geom, acc)
    return _add_bias(y, b)


def conv_backward_data(diff_dst: Any, weights: Any, src_shape: Sequence[int], strides: Any = None,
                       dilates: Any = None, padding_l: Any = None, padding_r: Any = None,
                       groups: int | None = None, *, dtype: Any = None) -> np.ndarray:
    """diff_src [N, IC, in...] = the adjoint of :func:`conv_forward` (without bias) applied to
    diff_dst. Input points no output reads (cropped by negative padding, skipped by strides)
    get 0."""
    op = "conv_backward_data"
    dy = _as_array("diff_dst", diff_dst, op)
    w = _as_array("weights", weights, op)
    geom = _conv_geom(tuple(src_shape), w.shape, strides, dilates, padding_l, padding_r, groups,
                      op, dst_shape=dy.shape)
    acc = _acc_dtype(dtype, dy, w)
    return _bwd_data(dy, _grouped(w, geom, geom.oc, geom.ic), geom, acc)


def conv_backward_weights(src: Any, diff_dst: Any, weights_shape: Sequence[int],
                          strides: Any = None, dilates: Any = None, padding_l: Any = None,
                          padding_r: Any = None, groups: int | None = None,
                          with_bias: bool = True, *, dtype: Any = None
                          ) -> tuple[np.ndarray, np.ndarray | None]:
    """(diff_weights in the shape ``weights_shape`` (grouped or not), diff_bias [OC] or None)."""
    op = "conv_backward_weights"
    x = _as_array("src", src, op)
    dy = _as_array("diff_dst", diff_dst, op)
    wshape = tuple(weights_shape)
    geom = _conv_geom(x.shape, wshape, strides, dilates, padding_l, padding_r, groups, op,
                      dst_shape=dy.shape)
    acc = _acc_dtype(dtype, x, dy)
    dw = _bwd_weights(x, dy, geom, acc).reshape(wshape)
    db = dy.astype(acc, copy=False).sum(axis=(0, *range(2, dy.ndim))) if with_bias else None
    return dw, db


# --------------------------------------------------------------------------------------------
# deconvolution (transposed convolution)
# --------------------------------------------------------------------------------------------
def deconv_forward(src: Any, weights: Any, bias: Any = None, strides: Any = None,
                   dilates: Any = None, padding_l: Any = None, padding_r: Any = None,
                   groups: int | None = None, *, dtype: Any = None) -> np.ndarray:
    """dst [N, OC, (in-1)*s + ext - pl - pr, ...] of a oneDNN deconvolution; weights are
    oneDNN's [OC, IC, k...] or [G, OC/G, IC/G, k...] (see the module docstring)."""
    op = "deconv_forward"
    x = _as_array("src", src, op)
    w = _as_array("weights", weights, op)
    gd, gc = _deconv_geom(x.shape, w.shape, strides, dilates, padding_l, padding_r, groups, op)
    b = _check_bias(bias, gd.oc, op)
    acc = _acc_dtype(dtype, x, w, b)
    y = _bwd_data(x, _deconv_w_to_conv(w, gd), gc, acc)
    return _add_bias(y, b)


def deconv_backward_data(diff_dst: Any, weights: Any, src_shape: Sequence[int],
                         strides: Any = None, dilates: Any = None, padding_l: Any = None,
                         padding_r: Any = None, groups: int | None = None, *,
                         dtype: Any = None) -> np.ndarray:
    """diff_src [N, IC, in...] of a deconvolution: a convolution forward of diff_dst."""
    op = "deconv_backward_data"
    dy = _as_array("diff_dst", diff_dst, op)
    w = _as_array("weights", weights, op)
    gd, gc = _deconv_geom(tuple(src_shape), w.shape, strides, dilates, padding_l, padding_r,
                          groups, op, dst_shape=dy.shape)
    acc = _acc_dtype(dtype, dy, w)
    return _fwd(dy, _deconv_w_to_conv(w, gd), gc, acc)


def deconv_backward_weights(src: Any, diff_dst: Any, weights_shape: Sequence[int],
                            strides: Any = None, dilates: Any = None, padding_l: Any = None,
                            padding_r: Any = None, groups: int | None = None,
                            with_bias: bool = True, *, dtype: Any = None
                            ) -> tuple[np.ndarray, np.ndarray | None]:
    """(diff_weights in oneDNN deconv order, shaped ``weights_shape``; diff_bias [OC] or None)."""
    op = "deconv_backward_weights"
    x = _as_array("src", src, op)
    dy = _as_array("diff_dst", diff_dst, op)
    wshape = tuple(weights_shape)
    gd, gc = _deconv_geom(x.shape, wshape, strides, dilates, padding_l, padding_r, groups, op,
                          dst_shape=dy.shape)
    acc = _acc_dtype(dtype, x, dy)
    # the equivalent convolution reads diff_dst as its src and src as its diff_dst
    dwc = _bwd_weights(dy, x, gc, acc)                      # [G, ICg, OCg, k...]
    dw = np.ascontiguousarray(np.swapaxes(dwc, 1, 2)).reshape(wshape)
    db = dy.astype(acc, copy=False).sum(axis=(0, *range(2, dy.ndim))) if with_bias else None
    return dw, db


def deconv_weights_from_io(weights_io: Any, groups: int = 1) -> np.ndarray:
    """ONNX ConvTranspose / MIOpen transpose / PyTorch weights [IC, OC/G, k...] -> oneDNN
    deconvolution weights: [OC, IC, k...] when ``groups == 1``, else [G, OC/G, IC/G, k...]."""
    w = np.asarray(weights_io)
    if w.ndim < 3:
        raise invalid_arguments(f"deconv_weights_from_io: weights must be [IC, OC/G, k...], "
                                f"got dims {list(w.shape)}")
    if groups < 1 or w.shape[0] % groups:
        raise invalid_arguments(f"deconv_weights_from_io: IC dim {w.shape[0]} is not divisible "
                                f"by groups={groups}")
    wg = w.reshape(groups, w.shape[0] // groups, *w.shape[1:]).swapaxes(1, 2)
    return np.ascontiguousarray(wg[0] if groups == 1 else wg)


def deconv_weights_to_io(weights: Any, grouped: bool = False) -> np.ndarray:
    """Inverse of :func:`deconv_weights_from_io`: oneDNN deconvolution weights [OC, IC, k...]
    (or [G, OC/G, IC/G, k...] with ``grouped``) -> [IC, OC/G, k...]."""
    w = np.asarray(weights)
    if w.ndim < (4 if grouped else 3):
        form = "[G, OC/G, IC/G, k...]" if grouped else "[OC, IC, k...]"
        raise invalid_arguments(f"deconv_weights_to_io: expected {form} weights, got dims "
                                f"{list(w.shape)}")
    if not grouped:
        return np.ascontiguousarray(w.swapaxes(0, 1))
    g, ocg, icg = w.shape[:3]
    return np.ascontiguousarray(w.swapaxes(1, 2).reshape(g * icg, ocg, *w.shape[3:]))


# --------------------------------------------------------------------------------------------
# post-ops
# --------------------------------------------------------------------------------------------
def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def eltwise(alg: Any, x: np.ndarray, alpha: float = 0.0, beta: float = 0.0) -> np.ndarray:
    """oneDNN eltwise forward ``alg`` (an ``algorithm`` member or a name such as ``"relu"`` /
    ``"eltwise_relu"``) on x."""
    name = _eltwise_name(alg)
    if name == "relu":
        return np.where(x > 0, x, alpha * x)
    if name == "tanh":
        return np.tanh(x)
    if name == "logistic":
        return _sigmoid(x)
    if name == "linear":
        return alpha * x + beta
    if name in ("clip", "clip_v2"):
        return np.minimum(np.maximum(x, alpha), beta)
    if name == "elu":
        return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))
    if name == "square":
        return x * x
    if name == "abs":
        return np.abs(x)
    if name == "sqrt":
        return np.sqrt(x)
    if name == "exp":
        return np.exp(x)
    if name == "swish":
        return x * _sigmoid(alpha * x)
    if name == "soft_relu":   # oneDNN v3: log(1 + exp(alpha x)) / alpha
        a = alpha if alpha else 1.0
        return np.logaddexp(0.0, a * x) / a
    if name == "hardsigmoid":
        return np.clip(alpha * x + beta, 0.0, 1.0)
    raise invalid_arguments(f"apply_post_ops: eltwise algorithm {alg!r} is not supported by the "
                            "reference (relu, tanh, logistic, linear, clip, clip_v2, elu, "
                            "square, abs, sqrt, exp, swish, soft_relu, hardsigmoid)")


def _eltwise_name(alg: Any) -> str:
    name = getattr(alg, "name", alg)
    if not isinstance(name, str):
        try:
            from ..constants import algorithm
            name = algorithm(int(name)).name
        except Exception:  # noqa: BLE001
            raise invalid_arguments(f"apply_post_ops: unknown eltwise algorithm {alg!r}") from None
    name = name.lower()
    if name.startswith("eltwise_"):
        name = name[len("eltwise_"):]
    return name


def _normalize_op(op: Any, index: int) -> tuple:
    """('sum', scale, zero_point) or ('eltwise', alg, alpha, beta)."""
    if hasattr(op, "scale") and hasattr(op, "zero_point"):          # pydnnl.attr._sum_op
        return ("sum", float(op.scale), float(op.zero_point))
    if hasattr(op, "alg") and hasattr(op, "alpha"):                  # pydnnl.attr._eltwise_op
        return ("eltwise", op.alg, float(op.alpha), float(getattr(op, "beta", 0.0)))
    if isinstance(op, dict):
        kind = op.get("kind", "eltwise" if "alg" in op else None)
        if kind == "sum":
            return ("sum", float(op.get("scale", 1.0)), float(op.get("zero_point", 0)))
        if kind == "eltwise":
            return ("eltwise", op["alg"], float(op.get("alpha", 0.0)), float(op.get("beta", 0.0)))
    if isinstance(op, (tuple, list)) and op:
        head, rest = op[0], list(op[1:])
        if head == "sum":
            return ("sum", float(rest[0]) if rest else 1.0,
                    float(rest[1]) if len(rest) > 1 else 0.0)
        if head == "eltwise":
            if not rest:
                raise invalid_arguments(
                    f"apply_post_ops: op {index} ('eltwise') lacks an algorithm")
            head, rest = rest[0], rest[1:]
        return ("eltwise", head, float(rest[0]) if rest else 0.0,
                float(rest[1]) if len(rest) > 1 else 0.0)
    raise invalid_arguments(
        f"apply_post_ops: op {index} {op!r} is not understood; expected ('sum', scale, "
        "zero_point), ('eltwise', alg, alpha, beta), (alg, alpha, beta) or a post_ops entry")


def apply_post_ops(dst: Any, ops: Any, dst_prior: Any = None) -> np.ndarray:
    """Apply oneDNN post-ops in order to a primitive's result ``dst``.

    ``ops`` is a :class:`pydnnl.attr.post_ops`, or an iterable of its entries, or of tuples
    ``("sum", scale=1, zero_point=0)`` / ``("eltwise", alg, alpha=0, beta=0)`` /
    ``(alg, alpha, beta)`` / dicts with the same keys. ``sum`` computes
    ``dst = scale * (dst_prior - zero_point) + dst`` where ``dst_prior`` is the destination's
    content before the primitive ran (required when a sum is present).
    """
    y = np.array(dst, dtype=_acc_dtype(None, np.asarray(dst)), copy=True)
    if ops is None:
        return y
    entries: Iterable = getattr(ops, "ops", ops)
    for i, raw in enumerate(entries):
        op = _normalize_op(raw, i)
        if op[0] == "sum":
            if dst_prior is None:
                raise invalid_arguments(f"apply_post_ops: op {i} is a sum but dst_prior is None")
            prior = np.asarray(dst_prior)
            if prior.shape != y.shape:
                raise invalid_arguments(f"apply_post_ops: dst_prior dims {list(prior.shape)} "
                                        f"differ from dst dims {list(y.shape)}")
            y = op[1] * (prior.astype(y.dtype) - op[2]) + y
        else:
            y = eltwise(op[1], y, op[2], op[3]).astype(y.dtype, copy=False)
    return y
