"""ONNX conformance of the convolution primitives: the Conv and ConvTranspose node test cases
of the installed onnx (built in memory from ``onnx.backend.test.case.node``) and the
``pytorch-converted`` Conv / ConvTranspose models shipped in the onnx wheel, run through the
pydnnl primitives on every device and compared with their stored outputs (computed by ONNX's
and PyTorch's own code, not by pydnnl).

ONNX attributes are translated here: ONNX dilation ``D`` is oneDNN's ``D - 1``; ``auto_pad``,
``output_padding`` and ``output_shape`` become explicit (possibly asymmetric) paddings; the
ConvTranspose weights ``[C_in, C_out/group, k...]`` are passed as stored, through a strided
memory desc of oneDNN's logical deconvolution weights ``[G, OC/G, IC/G, k...]``.
"""
from __future__ import annotations

import functools
import importlib
import os
import sys

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.primitives.conv import convolution_forward, deconvolution_forward

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402

F32 = dnnl.memory.data_type.f32
MD = dnnl.memory.desc
ACT = {1: "ncw", 2: "nchw", 3: "ncdhw"}


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else (v or "NOTSET")


def conv_params(x_shape, w_shape, a):
    """ONNX Conv -> (strides, dilates, padding_l, padding_r, group), oneDNN conventions."""
    nsp = len(x_shape) - 2
    k = list(a.get("kernel_shape", w_shape[2:]))
    s = list(a.get("strides", [1] * nsp))
    dil = list(a.get("dilations", [1] * nsp))
    pads = list(a.get("pads", [0] * 2 * nsp))
    ap = _s(a.get("auto_pad"))
    if ap == "VALID":
        pads = [0] * 2 * nsp
    elif ap in ("SAME_UPPER", "SAME_LOWER"):
        lo, hi = [], []
        for i in range(nsp):
            out = -(-x_shape[2 + i] // s[i])
            total = max(0, (out - 1) * s[i] + (k[i] - 1) * dil[i] + 1 - x_shape[2 + i])
            small, big = total // 2, total - total // 2
            lo.append(big if ap == "SAME_LOWER" else small)
            hi.append(small if ap == "SAME_LOWER" else big)
        pads = lo + hi
    return s, [v - 1 for v in dil], pads[:nsp], pads[nsp:], int(a.get("group", 1))


def convtranspose_params(x_shape, w_shape, a):
    """ONNX ConvTranspose -> (strides, dilates, padding_l, padding_r, group): the output
    padding and an explicit output shape become a smaller (possibly negative) padding_r."""
    nsp = len(x_shape) - 2
    k = list(a.get("kernel_shape", w_shape[2:]))
    s = list(a.get("strides", [1] * nsp))
    dil = list(a.get("dilations", [1] * nsp))
    opad = list(a.get("output_padding", [0] * nsp))
    ap = _s(a.get("auto_pad"))
    out_shape = a.get("output_shape")
    pads = a.get("pads")
    if pads is None and (out_shape is not None or ap in ("SAME_UPPER", "SAME_LOWER")):
        if out_shape is None:
            out_shape = [x_shape[2 + i] * s[i] for i in range(nsp)]
        out_shape = list(out_shape)[-nsp:]
        lo, hi = [], []
        for i in range(nsp):
            total = s[i] * (x_shape[2 + i] - 1) + opad[i] + (k[i] - 1) * dil[i] + 1 - out_shape[i]
            if ap == "SAME_UPPER":
                lo.append(total // 2)
                hi.append(total - total // 2)
            else:
                lo.append(total - total // 2)
                hi.append(total // 2)
        pads = lo + hi
    elif pads is None:
        pads = [0] * 2 * nsp
    pads = list(pads)
    return (s, [v - 1 for v in dil], pads[:nsp], [pads[nsp + i] - opad[i] for i in range(nsp)],
            int(a.get("group", 1)))


def _ct_weights_desc(w_shape, group):
    """oneDNN deconvolution weights ``[G, OC/G, IC/G, k...]`` over ONNX's stored
    ``[C_in, C_out/group, k...]`` (= ``[G][IC/G][OC/G][k]``): a strided desc, no copy."""
    cin, ocg, *k = w_shape
    icg = cin // group
    ks = [int(np.prod(k[i + 1:])) for i in range(len(k))]
    kk = int(np.prod(k))
    if group == 1:  # [OC, IC, k]
        return MD([ocg, cin, *k], F32, [kk, ocg * kk, *ks])
    return MD([group, ocg, icg, *k], F32, [icg * ocg * kk, kk, ocg * kk, *ks])


def run_node(engine, stream, op_type, a, x, w, b, solver=None):
    """One Conv / ConvTranspose through the pydnnl primitives; returns y."""
    import pyopencl as cl

    x, w = np.ascontiguousarray(x, np.float32), np.ascontiguousarray(w, np.float32)
    nsp = x.ndim - 2
    extra = {} if solver is None else {"solver": solver}
    if op_type == "Conv":
        s, d, pl, pr, g = conv_params(x.shape, w.shape, a)
        wdims = list(w.shape) if g == 1 else [g, w.shape[0] // g, *w.shape[1:]]
        w_md = MD(wdims, F32, "abcdefgh"[:len(wdims)])  # ONNX [M, C/g, k] is goihw
        geo_cls, alg = convolution_forward, dnnl.algorithm.convolution_auto
        from pydnnl.conv_shapes import conv_output_dims as out_dims
    else:
        s, d, pl, pr, g = convtranspose_params(x.shape, w.shape, a)
        w_md = _ct_weights_desc(w.shape, g)
        geo_cls, alg = deconvolution_forward, dnnl.algorithm.deconvolution_direct
        from pydnnl.conv_shapes import deconv_output_dims as out_dims
    ydims = out_dims(x.shape, w_md.get_dims(), s, d, pl, pr)
    b_md = MD([ydims[1]], F32, "x") if b is not None else None
    pd = geo_cls.primitive_desc(engine, dnnl.prop_kind.forward_inference, alg,
                                MD(x.shape, F32, ACT[nsp]), w_md, b_md,
                                MD(ydims, F32, ACT[nsp]), s, d, pl, pr, **extra)
    # the weights exactly as ONNX stores them
    wbuf = cl.Buffer(engine.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                     hostbuf=w)
    args = {dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), engine, x),
            dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), engine, wbuf),
            dnnl.ARG_DST: dnnl.memory(pd.dst_desc(), engine)}
    if b is not None:
        args[dnnl.ARG_BIAS] = dnnl.memory(pd.bias_desc(), engine, np.asarray(b, np.float32))
    geo_cls(pd).execute(stream, args)
    stream.wait()
    return args[dnnl.ARG_DST].to_numpy(), pd


def _close(got, want, what):
    assert got.shape == want.shape, what
    scale = max(float(np.abs(want).max()), 1e-30)
    # stored outputs are float32 results of other implementations: both sides round
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale, err_msg=what)


# ---------------------------------------------------------------------------------------------
# node test cases
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def node_cases():
    """The Conv / ConvTranspose node test cases of the installed onnx, built in memory (the
    case modules append to ``_NodeTestCases`` when imported; reloaded if an earlier filtered
    collection dropped ours)."""
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


NODE_NAMES = [c.name for c in node_cases()]


def test_node_cases_present():
    assert len(NODE_NAMES) >= 15
    assert sum(n.startswith("test_convtranspose") for n in NODE_NAMES) >= 10


# each case through one solver, alternating, so that both meet ONNX's data (the solvers are
# checked against the reference over a wider sweep in test_conv_solvers.py)
NODE_PARAMS = [(n, ("direct", "im2col_gemm")[i % 2]) for i, n in enumerate(NODE_NAMES)]


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("name, solver", NODE_PARAMS)
def test_node_case(engine, stream, name, solver):
    (case,) = [c for c in node_cases() if c.name == name]
    node = case.model.graph.node[0]
    (ins, outs), = case.data_sets
    named = dict(zip([n for n in node.input if n], ins))
    x, w = named[node.input[0]], named[node.input[1]]
    b = named.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    got, pd = run_node(engine, stream, node.op_type, _attrs(node), x, w, b, solver=solver)
    assert solver in pd.impl_info_str()
    _close(got, np.asarray(outs[0]), name)


# ---------------------------------------------------------------------------------------------
# pytorch-converted models
# ---------------------------------------------------------------------------------------------
PYTORCH_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data",
                           "pytorch-converted")
PYTORCH_CASES = sorted(d for d in (os.listdir(PYTORCH_DIR) if os.path.isdir(PYTORCH_DIR) else [])
                       if d.startswith("test_Conv"))


def test_pytorch_converted_present():
    assert len(PYTORCH_CASES) >= 28, PYTORCH_CASES


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("case", PYTORCH_CASES)
def test_pytorch_converted(engine, stream, case):
    d = os.path.join(PYTORCH_DIR, case)
    model = onnx.load(os.path.join(d, "model.onnx"))
    (node,) = [n for n in model.graph.node if n.op_type in ("Conv", "ConvTranspose")]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    x = numpy_helper.to_array(onnx.load_tensor(os.path.join(d, "test_data_set_0", "input_0.pb")))
    y = numpy_helper.to_array(onnx.load_tensor(os.path.join(d, "test_data_set_0", "output_0.pb")))
    w = inits[node.input[1]]
    b = inits[node.input[2]] if len(node.input) > 2 and node.input[2] else None
    got, _ = run_node(engine, stream, node.op_type, _attrs(node), x, w, b)
    _close(got, y, case)
