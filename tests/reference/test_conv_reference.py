"""The numpy convolution / deconvolution reference against oracles nobody here wrote:

* a naive direct loop nest written below, for tiny shapes;
* ONNX's reference evaluator (Conv, ConvTranspose) on randomized problems, the ONNX node test
  cases built from the wheel's case modules, and the pytorch-converted Conv / ConvTranspose
  models shipped in the wheel with their stored outputs;
* finite differences and the adjoint identities for the backward passes;
* ONNX shape inference and MIOpen's formulas for the output-size helpers.

Conventions: oneDNN dilation counts from 0 (ONNX dilation = d + 1); oneDNN deconvolution
weights are [OC, IC, k...] (grouped [G, OC/G, IC/G, k...]) while ONNX ConvTranspose weights are
[IC, OC/G, k...]: the test converts with its own code (``onnx_ct_weights_to_onednn``).
"""
from __future__ import annotations

import functools
import importlib
import itertools
import os
import sys

import numpy as np
import pytest

from pydnnl.conv_shapes import (
    conv_output_dims,
    deconv_output_dims,
    kernel_extent,
    miopen_forward_output_dim,
    miopen_forward_output_dim_nd,
    validate_conv,
)
from pydnnl.error import invalid_arguments
from pydnnl.reference.conv import (
    apply_post_ops,
    conv_backward_data,
    conv_backward_weights,
    conv_forward,
    deconv_backward_data,
    deconv_backward_weights,
    deconv_forward,
    deconv_weights_from_io,
    deconv_weights_to_io,
)

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


# ---------------------------------------------------------------------------------------------
# naive loop nests (oneDNN semantics, written from the definition)
# ---------------------------------------------------------------------------------------------
def _wg(w, groups, nsp):
    """Any weights form -> [G, OCg, ICg, k...]."""
    if w.ndim == nsp + 3:
        return w
    return w.reshape(groups, w.shape[0] // groups, *w.shape[1:])


def _in_pos(o, k, s, d, pl):
    return tuple(oo * ss - pp + kk * (dd + 1) for oo, kk, ss, dd, pp in zip(o, k, s, d, pl))


def _inside(pos, shape):
    return all(0 <= p < n for p, n in zip(pos, shape))


def naive_conv_fwd(x, w, b, s, d, pl, pr, groups=1):
    nsp = x.ndim - 2
    wg = _wg(w, groups, nsp)
    g, ocg, icg = wg.shape[:3]
    ks = wg.shape[3:]
    osz = tuple((x.shape[2 + i] - kernel_extent(ks[i], d[i]) + pl[i] + pr[i]) // s[i] + 1
                for i in range(nsp))
    y = np.zeros((x.shape[0], g * ocg, *osz))
    for n, gi, oc in itertools.product(range(x.shape[0]), range(g), range(ocg)):
        for o in np.ndindex(*osz):
            acc = 0.0 if b is None else float(b[gi * ocg + oc])
            for ic in range(icg):
                for k in np.ndindex(*ks):
                    pos = _in_pos(o, k, s, d, pl)
                    if _inside(pos, x.shape[2:]):
                        acc += x[(n, gi * icg + ic, *pos)] * wg[(gi, oc, ic, *k)]
            y[(n, gi * ocg + oc, *o)] = acc
    return y


def naive_conv_bwd_data(dy, w, src_shape, s, d, pl, groups=1):
    nsp = dy.ndim - 2
    wg = _wg(w, groups, nsp)
    g, ocg, icg = wg.shape[:3]
    dx = np.zeros(src_shape)
    for n, gi, oc in itertools.product(range(dy.shape[0]), range(g), range(ocg)):
        for o in np.ndindex(*dy.shape[2:]):
            for ic in range(icg):
                for k in np.ndindex(*wg.shape[3:]):
                    pos = _in_pos(o, k, s, d, pl)
                    if _inside(pos, src_shape[2:]):
                        dx[(n, gi * icg + ic, *pos)] += (dy[(n, gi * ocg + oc, *o)]
                                                         * wg[(gi, oc, ic, *k)])
    return dx


def naive_conv_bwd_weights(x, dy, w_shape, s, d, pl, groups=1):
    nsp = x.ndim - 2
    grouped = len(w_shape) == nsp + 3
    gshape = w_shape if grouped else (groups, w_shape[0] // groups, *w_shape[1:])
    dw = np.zeros(gshape)
    g, ocg, icg = gshape[:3]
    for n, gi, oc in itertools.product(range(x.shape[0]), range(g), range(ocg)):
        for o in np.ndindex(*dy.shape[2:]):
            for ic in range(icg):
                for k in np.ndindex(*gshape[3:]):
                    pos = _in_pos(o, k, s, d, pl)
                    if _inside(pos, x.shape[2:]):
                        dw[(gi, oc, ic, *k)] += (x[(n, gi * icg + ic, *pos)]
                                                 * dy[(n, gi * ocg + oc, *o)])
    return dw.reshape(w_shape), dy.sum(axis=(0, *range(2, dy.ndim)))


def naive_deconv_fwd(x, w, b, s, d, pl, pr, groups=1):
    """dst[n, g*OCg+oc, i*s - pl + k*(d+1)] += src[n, g*ICg+ic, i] * w[g, oc, ic, k]."""
    nsp = x.ndim - 2
    wg = _wg(w, groups, nsp)
    g, ocg, icg = wg.shape[:3]
    ks = wg.shape[3:]
    osz = tuple((x.shape[2 + i] - 1) * s[i] + kernel_extent(ks[i], d[i]) - pl[i] - pr[i]
                for i in range(nsp))
    y = np.zeros((x.shape[0], g * ocg, *osz))
    for n, gi, ic in itertools.product(range(x.shape[0]), range(g), range(icg)):
        for i in np.ndindex(*x.shape[2:]):
            for oc in range(ocg):
                for k in np.ndindex(*ks):
                    pos = _in_pos(i, k, s, d, pl)
                    if _inside(pos, osz):
                        y[(n, gi * ocg + oc, *pos)] += (x[(n, gi * icg + ic, *i)]
                                                        * wg[(gi, oc, ic, *k)])
    if b is not None:
        y += b.reshape(1, -1, *([1] * nsp))
    return y


# ---------------------------------------------------------------------------------------------
# problems: (src dims, weights dims, strides, dilates, padding_l, padding_r, groups)
# ---------------------------------------------------------------------------------------------
TINY = {
    "1d": ((2, 3, 7), (4, 3, 3), (1,), (0,), (1,), (1,), None),
    "1d_stride_dil_asym": ((1, 4, 9), (2, 2, 2), (2,), (2,), (2,), (0,), 2),
    "2d": ((2, 3, 5, 4), (2, 3, 3, 2), (1, 1), (0, 0), (0, 1), (1, 0), None),
    "2d_grouped_goihw": ((1, 4, 6, 5), (2, 3, 2, 3, 3), (2, 1), (1, 0), (1, 1), (2, 0), None),
    "2d_depthwise": ((2, 3, 5, 5), (3, 1, 1, 3, 3), (1, 2), (0, 0), (1, 1), (1, 1), None),
    "2d_neg_pad_r": ((1, 2, 6, 6), (3, 2, 1, 1), (2, 2), (0, 0), (0, 0), (-1, -1), None),
    "2d_neg_pad_l": ((1, 2, 6, 5), (2, 2, 2, 2), (1, 2), (0, 0), (-1, 0), (0, 1), None),
    "3d": ((1, 2, 4, 3, 4), (2, 2, 2, 2, 3), (1, 2, 1), (0, 0, 1), (1, 0, 0), (0, 1, 1), None),
    "3d_groups_oihw": ((1, 4, 3, 4, 3), (4, 2, 2, 1, 2), (2, 1, 1), (0, 1, 0), (0, 0, 1),
                       (1, 0, 1), 2),
}
TINY_IDS = list(TINY)


def _rand(rng, shape):
    return rng.standard_normal(shape)


def _groups(wshape, nsp, groups):
    return wshape[0] if len(wshape) == nsp + 3 else (groups or 1)


@pytest.mark.parametrize("case", TINY_IDS)
def test_forward_vs_naive(case):
    sd, wd, s, d, pl, pr, groups = TINY[case]
    rng = np.random.default_rng(1)
    x, w = _rand(rng, sd), _rand(rng, wd)
    g = _groups(wd, len(sd) - 2, groups)
    oc = wd[0] * wd[1] if len(wd) == len(sd) + 1 else wd[0]
    b = _rand(rng, (oc,))
    got = conv_forward(x, w, b, s, d, pl, pr, groups=groups)
    ref = naive_conv_fwd(x, w, b, s, d, pl, pr, g)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    assert got.dtype == np.float64
    np.testing.assert_allclose(conv_forward(x, w, None, s, d, pl, pr, groups=groups),
                               naive_conv_fwd(x, w, None, s, d, pl, pr, g), atol=1e-12)


@pytest.mark.parametrize("case", TINY_IDS)
def test_backward_vs_naive(case):
    sd, wd, s, d, pl, pr, groups = TINY[case]
    rng = np.random.default_rng(2)
    x, w = _rand(rng, sd), _rand(rng, wd)
    g = _groups(wd, len(sd) - 2, groups)
    dst = conv_output_dims(sd, wd, s, d, pl, pr, groups=groups)
    dy = _rand(rng, dst)
    dx = conv_backward_data(dy, w, sd, s, d, pl, pr, groups=groups)
    np.testing.assert_allclose(dx, naive_conv_bwd_data(dy, w, sd, s, d, pl, g), atol=1e-12)
    dw, db = conv_backward_weights(x, dy, wd, s, d, pl, pr, groups=groups, with_bias=True)
    rdw, rdb = naive_conv_bwd_weights(x, dy, wd, s, d, pl, g)
    assert dw.shape == tuple(wd)
    np.testing.assert_allclose(dw, rdw, atol=1e-12)
    np.testing.assert_allclose(db, rdb, atol=1e-12)
    assert conv_backward_weights(x, dy, wd, s, d, pl, pr, groups=groups, with_bias=False)[1] is None


DECONV = {
    "1d": ((2, 3, 4), (2, 3, 3), (2,), (0,), (1,), (0,), None),
    "2d": ((1, 2, 3, 4), (3, 2, 2, 3), (2, 1), (0, 1), (0, 1), (1, 0), None),
    "2d_grouped": ((2, 4, 3, 3), (2, 1, 2, 3, 2), (1, 2), (1, 0), (1, 0), (0, 1), None),
    "2d_out_pad": ((1, 2, 3, 3), (2, 2, 3, 3), (2, 2), (0, 0), (1, 1), (0, -1), None),
    "3d_groups_oihw": ((1, 4, 2, 3, 2), (4, 2, 2, 2, 1), (2, 1, 1), (0, 0, 1), (0, 1, 0),
                       (1, 0, 0), 2),
}


@pytest.mark.parametrize("case", list(DECONV))
def test_deconv_vs_naive(case):
    sd, wd, s, d, pl, pr, groups = DECONV[case]
    nsp = len(sd) - 2
    rng = np.random.default_rng(3)
    x, w = _rand(rng, sd), _rand(rng, wd)
    g = _groups(wd, nsp, groups)
    dst = deconv_output_dims(sd, wd, s, d, pl, pr, groups=groups)
    b = _rand(rng, (dst[1],))
    y = deconv_forward(x, w, b, s, d, pl, pr, groups=groups)
    ref = naive_deconv_fwd(x, w, b, s, d, pl, pr, g)
    assert y.shape == ref.shape == tuple(dst)
    np.testing.assert_allclose(y, ref, atol=1e-12)
    # deconvolution forward == convolution backward-data with IC and OC swapped in the weights
    wg = _wg(w, g, nsp)
    wc = np.swapaxes(wg, 1, 2)
    np.testing.assert_allclose(
        deconv_forward(x, w, None, s, d, pl, pr, groups=groups),
        conv_backward_data(x, wc, dst, s, d, pl, pr), atol=1e-12)
    # backward: adjoint of the forward
    dy = _rand(rng, dst)
    dx = deconv_backward_data(dy, w, sd, s, d, pl, pr, groups=groups)
    lhs = np.vdot(deconv_forward(x, w, None, s, d, pl, pr, groups=groups), dy)
    np.testing.assert_allclose(np.vdot(x, dx), lhs, rtol=1e-12)
    dw, db = deconv_backward_weights(x, dy, wd, s, d, pl, pr, groups=groups)
    assert dw.shape == tuple(wd)
    np.testing.assert_allclose(np.vdot(w, dw), lhs, rtol=1e-12)
    np.testing.assert_allclose(db, dy.sum(axis=(0, *range(2, dy.ndim))))


# ---------------------------------------------------------------------------------------------
# finite differences and adjoint identities (float64)
# ---------------------------------------------------------------------------------------------
def _fd_grad(f, a, eps=1e-6):
    g = np.zeros_like(a)
    for idx in np.ndindex(*a.shape):
        old = a[idx]
        a[idx] = old + eps
        fp = f()
        a[idx] = old - eps
        fm = f()
        a[idx] = old
        g[idx] = (fp - fm) / (2 * eps)
    return g


@pytest.mark.parametrize("case", ["1d_stride_dil_asym", "2d_grouped_goihw", "2d_neg_pad_r", "3d"])
def test_conv_backward_finite_differences(case):
    sd, wd, s, d, pl, pr, groups = TINY[case]
    rng = np.random.default_rng(4)
    x, w = _rand(rng, sd), _rand(rng, wd)
    dst = conv_output_dims(sd, wd, s, d, pl, pr, groups=groups)
    b, dy = _rand(rng, (dst[1],)), _rand(rng, dst)

    def loss():
        return float(np.vdot(conv_forward(x, w, b, s, d, pl, pr, groups=groups), dy))

    dx = conv_backward_data(dy, w, sd, s, d, pl, pr, groups=groups)
    dw, db = conv_backward_weights(x, dy, wd, s, d, pl, pr, groups=groups)
    np.testing.assert_allclose(dx, _fd_grad(loss, x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(dw, _fd_grad(loss, w), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(db, _fd_grad(loss, b), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("case", ["2d", "2d_out_pad"])
def test_deconv_backward_finite_differences(case):
    sd, wd, s, d, pl, pr, groups = DECONV[case]
    rng = np.random.default_rng(5)
    x, w = _rand(rng, sd), _rand(rng, wd)
    dst = deconv_output_dims(sd, wd, s, d, pl, pr, groups=groups)
    b, dy = _rand(rng, (dst[1],)), _rand(rng, dst)

    def loss():
        return float(np.vdot(deconv_forward(x, w, b, s, d, pl, pr, groups=groups), dy))

    dx = deconv_backward_data(dy, w, sd, s, d, pl, pr, groups=groups)
    dw, db = deconv_backward_weights(x, dy, wd, s, d, pl, pr, groups=groups)
    np.testing.assert_allclose(dx, _fd_grad(loss, x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(dw, _fd_grad(loss, w), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(db, _fd_grad(loss, b), rtol=1e-6, atol=1e-7)


def _random_conv_problem(rng, nsp, allow_negative_pad=True):
    g = int(rng.choice([1, 1, 2, 3]))
    icg, ocg = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    k = tuple(int(v) for v in rng.integers(1, 4, nsp))
    d = tuple(int(v) for v in rng.integers(0, 3, nsp))
    s = tuple(int(v) for v in rng.integers(1, 4, nsp))
    lo = -1 if allow_negative_pad else 0
    pl = tuple(int(v) for v in rng.integers(lo, 3, nsp))
    pr = tuple(int(v) for v in rng.integers(lo, 3, nsp))
    insz = tuple(max(kernel_extent(k[i], d[i]) - pl[i] - pr[i], 1) + int(rng.integers(0, 5))
                 for i in range(nsp))
    mb = int(rng.integers(1, 3))
    grouped = bool(rng.integers(0, 2))
    wd = (g, ocg, icg, *k) if grouped else (g * ocg, icg, *k)
    return (mb, g * icg, *insz), wd, s, d, pl, pr, (None if grouped else g)


@pytest.mark.parametrize("seed", range(12))
def test_adjoint_identities(seed):
    rng = np.random.default_rng(100 + seed)
    nsp = 1 + seed % 3
    sd, wd, s, d, pl, pr, groups = _random_conv_problem(rng, nsp)
    x, w = _rand(rng, sd), _rand(rng, wd)
    dst = conv_output_dims(sd, wd, s, d, pl, pr, groups=groups)
    dy = _rand(rng, dst)
    y = conv_forward(x, w, None, s, d, pl, pr, groups=groups)
    a = np.vdot(y, dy)
    b_ = np.vdot(x, conv_backward_data(dy, w, sd, s, d, pl, pr, groups=groups))
    c = np.vdot(w, conv_backward_weights(x, dy, wd, s, d, pl, pr, groups=groups)[0])
    np.testing.assert_allclose([b_, c], [a, a], rtol=1e-10, atol=1e-10)
    # deconvolution of the same geometry read backwards: src <-> dst
    wdc = tuple(wd) if len(wd) == nsp + 3 else None
    if wdc is not None:
        wdeconv = np.ascontiguousarray(np.swapaxes(w, 1, 2))      # [G, ICg, OCg, k]: OC<->IC
        # input points past the last window (strides) make the deconv output smaller: they
        # are a smaller padding_r for it (a deconvolution's "output padding")
        rem = [(sd[2 + i] + pl[i] + pr[i] - kernel_extent(wd[3 + i], d[i])) % s[i]
               for i in range(nsp)]
        pr_t = [pr[i] - rem[i] for i in range(nsp)]
        z = deconv_forward(dy, wdeconv, None, s, d, pl, pr_t)
        assert z.shape == tuple(sd)
        np.testing.assert_allclose(np.vdot(z, x), a, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(deconv_backward_data(x, wdeconv, dst, s, d, pl, pr_t), y,
                                   rtol=1e-10, atol=1e-10)


def test_dtypes():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    assert conv_forward(x, w, None, 1, 0, 1, 1).dtype == np.float32
    assert conv_forward(x.astype(np.float64), w).dtype == np.float64
    assert conv_forward(x, w, dtype=np.float64).dtype == np.float64
    xi = np.arange(50).reshape(1, 2, 5, 5)
    wi = np.ones((1, 2, 1, 1), np.int32)
    y = conv_forward(xi, wi)
    assert y.dtype == np.float64 and y[0, 0, 0, 0] == 0 + 25
    np.testing.assert_allclose(conv_forward(x, w, None, 1, 0, 1, 1),
                               conv_forward(x, w, None, 1, 0, 1, 1, dtype=np.float64), rtol=1e-5,
                               atol=1e-5)


# ---------------------------------------------------------------------------------------------
# ONNX
# ---------------------------------------------------------------------------------------------
def _onnx_run(op_type, inputs: dict, **attrs):
    node = helper.make_node(op_type, list(inputs), ["y"], **attrs)
    vis = [helper.make_tensor_value_info(n, TensorProto.DOUBLE, a.shape) for n, a in inputs.items()]
    graph = helper.make_graph([node], "g", vis,
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    return ReferenceEvaluator(model).run(None, inputs)[0]


def onnx_ct_weights_to_onednn(w_onnx, group):
    """ONNX ConvTranspose W [C_in, C_out/group, k...] -> oneDNN deconv [OC, IC, k...] (group 1)
    or [G, OC/G, IC/G, k...]."""
    cin, ocg = w_onnx.shape[:2]
    wg = w_onnx.reshape(group, cin // group, ocg, *w_onnx.shape[2:])   # [G, ICg, OCg, k]
    wg = np.ascontiguousarray(wg.transpose(0, 2, 1, *range(3, wg.ndim)))
    return wg[0] if group == 1 else wg


def _onnx_conv_attrs_to_onednn(x_shape, w_shape, attrs: dict):
    """ONNX Conv attributes -> (strides, dilates, padding_l, padding_r, groups), oneDNN style."""
    nsp = len(x_shape) - 2
    k = attrs.get("kernel_shape", list(w_shape[2:]))
    s = list(attrs.get("strides", [1] * nsp))
    dil = list(attrs.get("dilations", [1] * nsp))
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    pads = list(attrs.get("pads", [0] * (2 * nsp)))
    if auto_pad == "VALID":
        pads = [0] * (2 * nsp)
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        head, tail = [], []
        for i in range(nsp):
            out = -(-x_shape[2 + i] // s[i])
            total = max(0, (out - 1) * s[i] + (k[i] - 1) * dil[i] + 1 - x_shape[2 + i])
            lo = total - total // 2 if auto_pad == "SAME_LOWER" else total // 2
            head.append(lo)
            tail.append(total - lo)
        pads = head + tail
    return s, [v - 1 for v in dil], pads[:nsp], pads[nsp:], int(attrs.get("group", 1))


def _onnx_convtranspose_to_onednn(x_shape, w_shape, attrs: dict):
    """ONNX ConvTranspose attributes -> (strides, dilates, padding_l, padding_r, groups):
    output padding and output_shape become a smaller (possibly negative) padding_r."""
    nsp = len(x_shape) - 2
    k = list(w_shape[2:])
    s = list(attrs.get("strides", [1] * nsp))
    dil = list(attrs.get("dilations", [1] * nsp))
    opad = list(attrs.get("output_padding", [0] * nsp))
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    out_shape = attrs.get("output_shape")
    pads = attrs.get("pads")
    if pads is None and (out_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER")):
        if out_shape is None:
            out_shape = [x_shape[2 + i] * s[i] for i in range(nsp)]
        out_shape = list(out_shape)[-nsp:]
        head, tail = [], []
        for i in range(nsp):
            total = s[i] * (x_shape[2 + i] - 1) + opad[i] + (k[i] - 1) * dil[i] + 1 - out_shape[i]
            if auto_pad == "SAME_UPPER":
                head.append(total // 2)
                tail.append(total - total // 2)
            else:
                head.append(total - total // 2)
                tail.append(total // 2)
        pads = head + tail
    elif pads is None:
        pads = [0] * (2 * nsp)
    pads = list(pads)
    return (s, [v - 1 for v in dil], pads[:nsp], [pads[nsp + i] - opad[i] for i in range(nsp)],
            int(attrs.get("group", 1)))


def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _run_onnx_node_with_reference(node, x, w, b):
    attrs = _attrs(node)
    if node.op_type == "Conv":
        s, d, pl, pr, g = _onnx_conv_attrs_to_onednn(x.shape, w.shape, attrs)
        return conv_forward(x, w, b, s, d, pl, pr, groups=g, dtype=np.float64)
    assert node.op_type == "ConvTranspose"
    s, d, pl, pr, g = _onnx_convtranspose_to_onednn(x.shape, w.shape, attrs)
    return deconv_forward(x, onnx_ct_weights_to_onednn(w, g), b, s, d, pl, pr,
                          dtype=np.float64)


@pytest.mark.parametrize("seed", range(24))
def test_conv_vs_onnx_reference(seed):
    rng = np.random.default_rng(200 + seed)
    nsp = 1 + seed % 3
    sd, wd, s, d, pl, pr, groups = _random_conv_problem(rng, nsp, allow_negative_pad=False)
    g = _groups(wd, nsp, groups)
    x = rng.standard_normal(sd)
    w = rng.standard_normal(wd)
    w_onnx = w.reshape(-1, *w.shape[2:]) if len(wd) == nsp + 3 else w   # ONNX: [M, C/group, k]
    b = rng.standard_normal(w_onnx.shape[0])
    ref = _onnx_run("Conv", {"x": x, "w": w_onnx, "b": b}, group=g,
                    dilations=[v + 1 for v in d], strides=list(s), pads=[*pl, *pr],
                    kernel_shape=list(w.shape[-nsp:]))
    got = conv_forward(x, w, b, s, d, pl, pr, groups=groups)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("seed", range(18))
def test_convtranspose_vs_onnx_reference(seed):
    """Random ConvTranspose problems: dilation, strides, asymmetric pads, output padding, bias.

    onnx 1.23's reference ConvTranspose is only right for group > 1 when C_in == C_out == group
    (it slices W by output channels and writes one channel per group) and without bias then;
    the grouped cases here stay inside that (the naive loops above cover the rest)."""
    rng = np.random.default_rng(300 + seed)
    nsp = 1 + seed % 3
    group = 1 if seed % 4 else int(rng.integers(2, 4))
    cin, cout = (group, group) if group > 1 else (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    k = [int(v) for v in rng.integers(1, 4, nsp)]
    s = [int(v) for v in rng.integers(1, 4, nsp)]
    dil = [int(v) for v in rng.integers(1, 3, nsp)]
    pads = [int(v) for v in rng.integers(0, 3, 2 * nsp)]
    # onnx's reference (col2im) fails for an output padding >= the stride, which the spec allows
    # when it is smaller than the dilation: stay below the stride
    opad = [int(rng.integers(0, s[i])) for i in range(nsp)]
    insz = [int(v) for v in rng.integers(1, 5, nsp)]
    for i in range(nsp):   # keep the output positive
        ext = (k[i] - 1) * dil[i] + 1
        while (insz[i] - 1) * s[i] + ext + opad[i] - pads[i] - pads[nsp + i] <= 0:
            insz[i] += 1
    x = rng.standard_normal((2, cin, *insz))
    w = rng.standard_normal((cin, cout // group, *k))
    inputs = {"x": x, "w": w}
    b = None
    if group == 1:
        b = rng.standard_normal(cout)
        inputs["b"] = b
    attrs = dict(group=group, dilations=dil, strides=s, pads=pads, output_padding=opad)
    ref = _onnx_run("ConvTranspose", inputs, **attrs)
    node = helper.make_node("ConvTranspose", list(inputs), ["y"], **attrs)
    got = _run_onnx_node_with_reference(node, x, w, b)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)
    # the public helper agrees with the test's own conversion
    np.testing.assert_array_equal(deconv_weights_from_io(w, group),
                                  onnx_ct_weights_to_onednn(w, group))
    np.testing.assert_array_equal(deconv_weights_to_io(deconv_weights_from_io(w, group),
                                                       grouped=group > 1), w)


@functools.lru_cache(maxsize=None)
def onnx_conv_node_cases():
    """The Conv / ConvTranspose node test cases of the installed onnx, built in memory.

    Importing a case module runs its export functions, which append to the package-level list
    ``onnx.backend.test.case.node._NodeTestCases`` (``collect_testcases`` imports them all).
    A module imports once per process; if an earlier ``collect_testcases(<other op>)`` imported
    it with a filter that dropped these cases, it is reloaded."""
    import onnx.backend.test.case.node as node_pkg

    def ours():
        return {c.name: c for c in node_pkg._NodeTestCases
                if c.model is not None
                and c.model.graph.node[0].op_type in ("Conv", "ConvTranspose")}

    for m, op in (("conv", "Conv"), ("convtranspose", "ConvTranspose")):
        name = f"onnx.backend.test.case.node.{m}"
        saved, node_pkg._TargetOpType = node_pkg._TargetOpType, None
        try:
            if name not in sys.modules:
                importlib.import_module(name)
            elif not any(c.model.graph.node[0].op_type == op for c in ours().values()):
                importlib.reload(sys.modules[name])
        finally:
            node_pkg._TargetOpType = saved
    cases = ours()
    return tuple(cases[k] for k in sorted(cases))


def test_onnx_node_cases_present():
    names = {c.name for c in onnx_conv_node_cases()}
    assert {"test_basic_conv_with_padding", "test_conv_with_autopad_same",
            "test_conv_with_strides_and_asymmetric_padding", "test_convtranspose",
            "test_convtranspose_output_shape", "test_convtranspose_group_2",
            "test_convtranspose_autopad_same", "test_convtranspose_dilations"} <= names
    assert len(names) >= 15


NODE_CASE_NAMES = [c.name for c in onnx_conv_node_cases()]


@pytest.mark.parametrize("name", NODE_CASE_NAMES)
def test_onnx_node_case(name):
    (case,) = [c for c in onnx_conv_node_cases() if c.name == name]
    node = case.model.graph.node[0]
    (ins, outs), = case.data_sets
    named = dict(zip([n for n in node.input if n], ins))
    x, w = named[node.input[0]], named[node.input[1]]
    b = named.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    got = _run_onnx_node_with_reference(node, np.asarray(x), np.asarray(w),
                                        None if b is None else np.asarray(b))
    expected = np.asarray(outs[0])
    assert got.shape == expected.shape, case.name
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=case.name)


PYTORCH_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data",
                           "pytorch-converted")
PYTORCH_CASES = sorted(d for d in (os.listdir(PYTORCH_DIR) if os.path.isdir(PYTORCH_DIR) else [])
                       if d.startswith(("test_Conv", "test_ConvTranspose")))


def test_pytorch_converted_cases_present():
    assert len(PYTORCH_CASES) >= 28, PYTORCH_CASES


@pytest.mark.parametrize("case", PYTORCH_CASES)
def test_pytorch_converted(case):
    d = os.path.join(PYTORCH_DIR, case)
    model = onnx.load(os.path.join(d, "model.onnx"))
    (node,) = [n for n in model.graph.node if n.op_type in ("Conv", "ConvTranspose")]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    x = numpy_helper.to_array(onnx.load_tensor(os.path.join(d, "test_data_set_0", "input_0.pb")))
    y = numpy_helper.to_array(onnx.load_tensor(os.path.join(d, "test_data_set_0", "output_0.pb")))
    assert node.input[0] == model.graph.input[0].name
    w = inits[node.input[1]]
    b = inits[node.input[2]] if len(node.input) > 2 and node.input[2] else None
    got = _run_onnx_node_with_reference(node, x.astype(np.float64), w.astype(np.float64),
                                        None if b is None else b.astype(np.float64))
    assert got.shape == y.shape
    np.testing.assert_allclose(got, y, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# output-size helpers
# ---------------------------------------------------------------------------------------------
def _onnx_inferred_shape(op_type, x_shape, w_shape, **attrs):
    node = helper.make_node(op_type, ["x", "w"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, w_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    dims = inferred.graph.output[0].type.tensor_type.shape.dim
    return tuple(v.dim_value for v in dims)


@pytest.mark.parametrize("seed", range(16))
def test_output_dims_vs_onnx_shape_inference_and_miopen(seed):
    rng = np.random.default_rng(400 + seed)
    nsp = 1 + seed % 3
    sd, wd, s, d, pl, pr, groups = _random_conv_problem(rng, nsp, allow_negative_pad=False)
    g = _groups(wd, nsp, groups)
    w_onnx = wd if len(wd) == nsp + 2 else (wd[0] * wd[1], *wd[2:])
    ours = conv_output_dims(sd, wd, s, d, pl, pr, groups=groups)
    onnx_shape = _onnx_inferred_shape("Conv", sd, w_onnx, group=g, strides=list(s),
                                      dilations=[v + 1 for v in d], pads=[*pl, *pr])
    assert ours == onnx_shape
    # MIOpen: symmetric padding, 1-based dilation, C division, clamped to 1
    mi = miopen_forward_output_dim_nd(sd, w_onnx, pl, s, [v + 1 for v in d], "convolution", g)
    expect = []
    for i in range(nsp):
        num = sd[2 + i] + 2 * pl[i] - (1 + (d[i] + 1) * (w_onnx[2 + i] - 1))
        expect.append(max(1, int(num / s[i]) + 1))
    assert mi == (sd[0], w_onnx[0], *expect)
    if all(v > 0 for v in expect) and all(
            sd[2 + i] + 2 * pl[i] >= kernel_extent(w_onnx[2 + i], d[i]) for i in range(nsp)):
        assert mi == conv_output_dims(sd, wd, s, d, pl, pl, groups=groups)
    if nsp == 2:
        assert miopen_forward_output_dim(*sd, *w_onnx, *pl, *s, d[0] + 1, d[1] + 1,
                                         mode="convolution", groups=g) == mi


@pytest.mark.parametrize("seed", range(12))
def test_deconv_output_dims_vs_onnx_and_miopen(seed):
    rng = np.random.default_rng(500 + seed)
    nsp = 1 + seed % 3
    group = int(rng.choice([1, 2]))
    cin, coutg = group * int(rng.integers(1, 3)), int(rng.integers(1, 3))
    k = [int(v) for v in rng.integers(1, 4, nsp)]
    s = [int(v) for v in rng.integers(1, 4, nsp)]
    dil = [int(v) for v in rng.integers(1, 3, nsp)]
    p = [int(v) for v in rng.integers(0, 2, nsp)]
    opad = [int(rng.integers(0, s[i])) for i in range(nsp)]
    insz = [int(v) for v in rng.integers(2, 6, nsp)]
    x_shape = (1, cin, *insz)
    w_io = (cin, coutg, *k)                                      # ONNX / MIOpen layout
    w_dnnl = (group, coutg, cin // group, *k) if group > 1 else (coutg, cin, *k)
    ours = deconv_output_dims(x_shape, w_dnnl, s, [v - 1 for v in dil], p, p,
                              output_padding=opad)
    onnx_shape = _onnx_inferred_shape("ConvTranspose", x_shape, w_io, group=group, strides=s,
                                      dilations=dil, pads=[*p, *p], output_padding=opad)
    assert ours == onnx_shape
    # the same through a smaller padding_r, oneDNN's way of saying output padding
    assert deconv_output_dims(x_shape, w_dnnl, s, [v - 1 for v in dil], p,
                              [p[i] - opad[i] for i in range(nsp)]) == ours
    mi = miopen_forward_output_dim_nd(x_shape, w_io, p, s, dil, "transpose", group, opad)
    assert mi == ours
    if nsp == 2:
        assert miopen_forward_output_dim(*x_shape, *w_io, *p, *s, *dil, mode="transpose",
                                         groups=group, trans_output_pad=opad) == mi


def test_miopen_output_dim_examples():
    # 3x3 pad 1 stride 1: same size; stride 2 halves (floor)
    assert (miopen_forward_output_dim(8, 64, 56, 56, 128, 64, 3, 3, 1, 1, 1, 1, 1, 1)
            == (8, 128, 56, 56))
    assert (miopen_forward_output_dim(8, 64, 56, 56, 128, 64, 3, 3, 1, 1, 2, 2, 1, 1)
            == (8, 128, 28, 28))
    # dilation 2 (MIOpen: 1 = dense): extent 5
    assert miopen_forward_output_dim(1, 4, 10, 10, 4, 4, 3, 3, 0, 0, 1, 1, 2, 2) == (1, 4, 6, 6)
    # input smaller than the kernel: MIOpen clamps to 1
    assert miopen_forward_output_dim(1, 4, 2, 2, 4, 4, 5, 5, 0, 0, 1, 1, 1, 1) == (1, 4, 1, 1)
    # depthwise: C = 32, groups = 32, filter [32, 1, 3, 3]
    assert miopen_forward_output_dim(2, 32, 7, 7, 32, 1, 3, 3, 1, 1, 1, 1, 1, 1,
                                     groups=32) == (2, 32, 7, 7)
    # transpose: filter [C_in=16, C_out/g=8], groups 2 -> 16 output channels;
    # out = 2*(7-1) + 1 + 1*(3-1) - 2*1 + 1 = 14
    assert miopen_forward_output_dim(1, 16, 7, 7, 16, 8, 3, 3, 1, 1, 2, 2, 1, 1,
                                     mode="transpose", groups=2,
                                     trans_output_pad=(1, 1)) == (1, 16, 14, 14)
    # same / valid padding modes
    assert miopen_forward_output_dim(1, 3, 11, 11, 8, 3, 3, 3, stride_h=2, stride_w=2,
                                     padding_mode="same") == (1, 8, 6, 6)
    assert miopen_forward_output_dim(1, 3, 11, 11, 8, 3, 3, 3, stride_h=2, stride_w=2,
                                     padding_mode="valid") == (1, 8, 5, 5)
    assert miopen_forward_output_dim_nd((1, 2, 5, 6, 7), (4, 2, 3, 3, 3), (1, 0, 1), (1, 1, 2),
                                        (1, 1, 1)) == (1, 4, 5, 4, 4)


def test_miopen_output_dim_errors():
    with pytest.raises(invalid_arguments, match="channels do not match"):
        miopen_forward_output_dim(1, 3, 8, 8, 4, 2, 3, 3)
    with pytest.raises(invalid_arguments, match="channels do not match"):
        miopen_forward_output_dim(1, 6, 8, 8, 5, 2, 3, 3, groups=3)      # K=5 not a multiple of 3
    with pytest.raises(invalid_arguments, match="transpose"):
        miopen_forward_output_dim(1, 6, 8, 8, 4, 2, 3, 3, mode="transpose")
    with pytest.raises(invalid_arguments, match="output padding"):
        miopen_forward_output_dim(1, 4, 8, 8, 4, 2, 3, 3, stride_h=2, stride_w=2,
                                  mode="transpose", trans_output_pad=(2, 0))
    with pytest.raises(invalid_arguments, match="dilations"):
        miopen_forward_output_dim(1, 4, 8, 8, 4, 4, 3, 3, dil_h=0)
    with pytest.raises(invalid_arguments, match="mode"):
        miopen_forward_output_dim(1, 4, 8, 8, 4, 4, 3, 3, mode="fft")


def test_validate_conv_geometry():
    gm = validate_conv((2, 6, 9, 8), (3, 4, 2, 3, 3), (2, 1), (1, 0), (1, 0), (2, 1))
    assert gm.groups == 3 and gm.ic == 6 and gm.oc == 12 and gm.grouped_weights
    assert gm.extents == (5, 3)
    assert gm.dst_dims() == (2, 12, (9 - 5 + 3) // 2 + 1, (8 - 3 + 1) // 1 + 1)
    assert gm.weights_dims() == (3, 4, 2, 3, 3) and gm.bias_dims() == (12,)
    # padding_r defaults to padding_l; ints broadcast
    assert conv_output_dims((1, 1, 5, 5), (1, 1, 3, 3), 1, 0, 1) == (1, 1, 5, 5)
    # deconv: out = (in-1)*s + ext - pl - pr
    assert deconv_output_dims((1, 4, 5), (6, 4, 3), 2, 1, 1, 0) == (1, 6, 4 * 2 + 5 - 1)
    assert deconv_output_dims((1, 4, 5), (2, 3, 2, 3), 2, 0, 0, 0) == (1, 6, 11)


# ---------------------------------------------------------------------------------------------
# bad inputs
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call, match", [
    (lambda: conv_forward(np.zeros((1, 3, 5, 5)), np.zeros((4, 2, 3, 3))),
     r"channel/group mismatch: src has IC=3"),
    (lambda: conv_forward(np.zeros((1, 4, 5, 5)), np.zeros((4, 2, 3, 3)), groups=3),
     r"not divisible by groups=3"),
    (lambda: conv_forward(np.zeros((1, 4, 5, 5)), np.zeros((2, 2, 2, 3, 3)), groups=4),
     r"groups=4 disagrees with grouped weights"),
    (lambda: conv_forward(np.zeros((1, 4, 5, 5)), np.zeros((4, 4, 3))),
     r"weights rank must be 4 .* or 5 .* got 3 dims"),
    (lambda: conv_forward(np.zeros((1, 4, 5, 5)), np.zeros((4, 4, 3, 3)), None, 1, 3),
     r"dilation too large for the input along H"),
    (lambda: conv_forward(np.zeros((1, 4, 2, 5)), np.zeros((4, 4, 3, 3))),
     r"non-positive output size along H"),
    (lambda: conv_forward(np.zeros((1, 4, 5, 5)), np.zeros((4, 4, 3, 3)), None, (1, 0)),
     r"strides must be positive"),
    (lambda: conv_forward(np.zeros((1, 4, 5, 5)), np.zeros((4, 4, 3, 3)), None, 1, -1),
     r"dilates must be >= 0"),
    (lambda: conv_forward(np.zeros((1, 4, 5, 5)), np.zeros((4, 4, 3, 3)), None, (1, 1, 1)),
     r"strides must have 2 int entries"),
    (lambda: conv_forward(np.zeros((1, 4, 5, 5)), np.zeros((4, 4, 3, 3)), np.zeros(3)),
     r"bias dims must be \[OC\] = \[4\]"),
    (lambda: conv_forward(np.zeros((4, 5)), np.zeros((4, 4, 3))),
     r"src must have 3, 4 or 5 dims"),
    (lambda: conv_backward_data(np.zeros((1, 4, 4, 4)), np.zeros((4, 4, 3, 3)), (1, 4, 5, 5)),
     r"dst dims \[1, 4, 4, 4\] do not match the \[1, 4, 3, 3\]"),
    (lambda: conv_backward_weights(np.zeros((1, 4, 5, 5)), np.zeros((1, 4, 3, 3)), (4, 2, 3, 3)),
     r"channel/group mismatch"),
    (lambda: deconv_forward(np.zeros((1, 4, 5)), np.zeros((4, 3, 3))),
     r"channel/group mismatch: src has IC=4"),
    (lambda: deconv_forward(np.zeros((1, 4, 2)), np.zeros((4, 4, 3)), None, 1, 0, 3, 3),
     r"output size along W is -2 <= 0"),
    (lambda: deconv_backward_data(np.zeros((1, 4, 6)), np.zeros((4, 4, 3)), (1, 4, 5)),
     r"dst dims \[1, 4, 6\] do not match the \[1, 4, 7\]"),
    (lambda: deconv_output_dims((1, 4, 5), (4, 4, 3), 2, 0, 0, 0, output_padding=2),
     r"output_padding\[W\]=2 must be smaller than the stride 2"),
    (lambda: validate_conv((1, 4, 5), (4, 4, 3), output_padding=1),
     r"output_padding applies to deconvolution only"),
    (lambda: conv_output_dims((1, 0, 5), (4, 4, 3)), r"src dims must be positive"),
    (lambda: apply_post_ops(np.zeros(3), [("sum", 1.0)]), r"sum but dst_prior is None"),
    (lambda: apply_post_ops(np.zeros(3), [("eltwise", "bogus")]), r"not supported"),
    (lambda: apply_post_ops(np.zeros(3), [42]), r"not understood"),
])
def test_bad_inputs_raise(call, match):
    with pytest.raises(invalid_arguments, match=match) as info:
        call()
    assert isinstance(info.value, ValueError)


# ---------------------------------------------------------------------------------------------
# post-ops
# ---------------------------------------------------------------------------------------------
def test_post_ops_in_order():
    rng = np.random.default_rng(8)
    y = rng.standard_normal((2, 3, 4))
    prior = rng.standard_normal((2, 3, 4))
    out = apply_post_ops(y, [("sum", 0.5, 1), ("eltwise", "relu", 0.1), ("linear", 2.0, 3.0),
                             ("eltwise_clip", -1.0, 4.0)], prior)
    t = 0.5 * (prior - 1) + y
    t = np.where(t > 0, t, 0.1 * t)
    t = 2 * t + 3
    np.testing.assert_allclose(out, np.clip(t, -1, 4))
    np.testing.assert_allclose(apply_post_ops(y, [("tanh",)]), np.tanh(y))
    np.testing.assert_allclose(apply_post_ops(y, [{"kind": "eltwise", "alg": "logistic"}]),
                               1 / (1 + np.exp(-y)))
    np.testing.assert_array_equal(apply_post_ops(y, None), y)
    # y itself is not modified
    y0 = y.copy()
    apply_post_ops(y, [("relu", 0.0)])
    np.testing.assert_array_equal(y, y0)


def test_post_ops_from_pydnnl_attr():
    from pydnnl.attr import post_ops
    from pydnnl.constants import algorithm
    ops = post_ops()
    ops.append_sum(2.0)
    ops.append_eltwise(algorithm.eltwise_relu, 0.0, 0.0)
    ops.append_eltwise(algorithm.eltwise_linear, 0.5, -1.0)
    y = np.array([-3.0, -0.5, 0.5, 3.0])
    prior = np.array([1.0, 0.0, -1.0, 0.25])
    np.testing.assert_allclose(apply_post_ops(y, ops, prior),
                               0.5 * np.maximum(2 * prior + y, 0) - 1)


def test_conv_with_post_ops_fused_shape():
    rng = np.random.default_rng(9)
    x, w, b = (rng.standard_normal((1, 2, 4, 4)), rng.standard_normal((3, 2, 3, 3)),
               rng.standard_normal(3))
    y = conv_forward(x, w, b, 1, 0, 1, 1)
    prior = rng.standard_normal(y.shape)
    out = apply_post_ops(y, [("sum", 1.0), ("relu", 0.0)], prior)
    np.testing.assert_allclose(out, np.maximum(y + prior, 0))
