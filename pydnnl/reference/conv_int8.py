"""Reference int8 convolution forward (oneDNN v3's quantization model) in int64/float64 numpy.

``post_ops(src_scale * wei_scale[oc] * sum (src - zp_src) * wei + bias) / dst_scale + zp_dst``
before the destination's rounding (:func:`pydnnl.reference.matmul.quantize`). Padded taps are
skipped, as oneDNN's reference does: with a src zero point they contribute nothing (not
``(0 - zp_src) * wei``). Zero points are common (a scalar) or per channel (``zp_src[IC]``
over src's channels, ``zp_dst[OC]`` over dst's: oneDNN's mask 2).

The deconvolution (:func:`deconv_int8`) scatters instead: each src position adds
``(src - zp_src) * wei`` into the output points its taps reach (oneDNN's deconvolution weights
``[G, OC/G, IC/G, k...]``), so an output point no src position reaches gets nothing from the
zero point either.
"""
from __future__ import annotations

import itertools

import numpy as np


def _int64_operands(src, wei, dilates, zp_src, dst_sp):
    """``src - zp_src`` and the weights as int64 (weights with their group dim), the dilation
    per spatial dim and a zero int64 output ``[N, OC, dst_sp...]``."""
    src = np.asarray(src, np.int64)
    N, IC = src.shape[:2]
    nsp = src.ndim - 2
    zp = np.asarray(zp_src, np.int64)
    src = src - (zp.reshape((1, IC) + (1,) * nsp) if zp.size > 1 else zp.reshape(()))
    w = np.asarray(wei, np.int64)
    if w.ndim == nsp + 2:
        w = w[None]
    dil = tuple(dilates) if dilates is not None else (0,) * nsp
    return src, w, dil, np.zeros((N, w.shape[0] * w.shape[1]) + tuple(dst_sp), np.int64)


def conv_int8_acc(src, wei, strides, padding_l, dst_sp, dilates=None, groups=1, zp_src=0):
    """The exact accumulator ``sum (src - zp_src) * wei`` over the taps inside src (int64),
    ``[N, OC, out...]``. ``src`` ``[N, IC, in...]``; ``wei`` ``[G, OCg, ICg, k...]`` (or
    ``[OC, IC, k...]`` when ``groups`` is 1); oneDNN dilation (0 = dense); ``zp_src`` a
    scalar or one per input channel."""
    src, w, dil, out = _int64_operands(src, wei, dilates, zp_src, dst_sp)
    nsp, (G, OCg, ICg), ks = src.ndim - 2, w.shape[:3], w.shape[3:]
    for g in range(G):
        xs = src[:, g * ICg:(g + 1) * ICg]
        for tap in itertools.product(*(range(k) for k in ks)):
            # input index of every output point for this tap, and which lie inside src
            idx, ok = [], np.ones(tuple(dst_sp), bool)
            for d in range(nsp):
                o = np.arange(dst_sp[d]) * strides[d] - padding_l[d] + tap[d] * (dil[d] + 1)
                shape = [1] * nsp
                shape[d] = dst_sp[d]
                inside = (o >= 0) & (o < src.shape[2 + d])
                ok = ok & inside.reshape(shape)
                idx.append(np.clip(o, 0, src.shape[2 + d] - 1).reshape(shape))
            patch = xs[(slice(None), slice(None)) + tuple(np.broadcast_arrays(*idx))]
            patch = patch * ok  # [N, ICg, out...], padded taps 0
            wt = w[(g, slice(None), slice(None)) + tap]  # [OCg, ICg]
            out[:, g * OCg:(g + 1) * OCg] += np.einsum("oi,ni...->no...", wt, patch)
    return out


def deconv_int8_acc(src, wei, strides, padding_l, dst_sp, dilates=None, groups=1, zp_src=0):
    """The exact accumulator of a deconvolution, ``[N, OC, out...]`` (int64): every src
    position ``i`` adds ``(src[i] - zp_src) * wei[tap]`` into output point ``i * stride -
    padding_l + tap * (dil + 1)`` where that lies inside ``dst_sp``. ``wei`` ``[G, OCg, ICg,
    k...]`` (or ``[OC, IC, k...]``); other arguments as :func:`conv_int8_acc`."""
    src, w, dil, out = _int64_operands(src, wei, dilates, zp_src, dst_sp)
    nsp, (G, OCg, ICg), ks = src.ndim - 2, w.shape[:3], w.shape[3:]
    for g in range(G):
        xs = src[:, g * ICg:(g + 1) * ICg]
        for tap in itertools.product(*(range(k) for k in ks)):
            # the output point each src position reaches through this tap; one tap maps src
            # positions to distinct points, so a fancy-indexed add adds each once
            src_idx, dst_idx = [], []
            for d in range(nsp):
                o = np.arange(src.shape[2 + d]) * strides[d] - padding_l[d] + tap[d] * (
                    dil[d] + 1)
                keep = (o >= 0) & (o < dst_sp[d])
                src_idx.append(np.nonzero(keep)[0])
                dst_idx.append(o[keep])
            if any(len(i) == 0 for i in src_idx):
                continue
            patch = xs[(slice(None), slice(None)) + np.ix_(*src_idx)]  # [N, ICg, reached...]
            wt = w[(g, slice(None), slice(None)) + tap]  # [OCg, ICg]
            part = np.einsum("oi,ni...->no...", wt, patch)
            view = out[:, g * OCg:(g + 1) * OCg]
            view[(slice(None), slice(None)) + np.ix_(*dst_idx)] += part
    return out


def conv_int8(src, wei, strides, padding_l, dst_sp, dilates=None, groups=1, bias=None,
              src_scale=1.0, wei_scale=1.0, dst_scale=1.0, zp_src=0, zp_dst=0,
              post_ops=None, deconvolution=False) -> np.ndarray:
    """The float64 result before dst's rounding; ``wei_scale`` and ``zp_dst`` a scalar or
    ``[OC]``, ``zp_src`` a scalar or ``[IC]``; ``post_ops`` a callable on the float64
    ``[N, OC, out...]`` value; ``deconvolution``: the accumulator of :func:`deconv_int8_acc`
    (oneDNN's deconvolution weights and output size)."""
    acc_of = deconv_int8_acc if deconvolution else conv_int8_acc
    acc = acc_of(src, wei, strides, padding_l, dst_sp, dilates, groups, zp_src)
    nsp = acc.ndim - 2
    per_c = (1, -1) + (1,) * nsp
    ws = np.asarray(wei_scale, np.float64)
    ws = ws.reshape(per_c) if ws.ndim else ws
    y = float(src_scale) * ws * acc.astype(np.float64)
    if bias is not None:
        y = y + np.asarray(bias, np.float64).reshape(per_c)
    if post_ops is not None:
        y = post_ops(y)
    zd = np.asarray(zp_dst, np.float64)
    return y / float(dst_scale) + (zd.reshape(per_c) if zd.size > 1 else zd.reshape(()))


def deconv_int8(src, wei, strides, padding_l, dst_sp, dilates=None, groups=1, **kw):
    """:func:`conv_int8` of a deconvolution (the same keywords)."""
    return conv_int8(src, wei, strides, padding_l, dst_sp, dilates, groups,
                     deconvolution=True, **kw)


__all__ = ["conv_int8", "conv_int8_acc", "deconv_int8", "deconv_int8_acc"]
