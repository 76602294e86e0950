"""Fusions. Before the build, exact GELU as the TorchScript exporter writes it before opset
20, ``Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)`` (either operand order per node), becomes
one Gelu node (``eltwise_gelu_erf``; there is no erf primitive to run Erf alone). While a
Conv, ConvTranspose, Gemm or MatMul is built, the chain of activations and arithmetic nodes
after it that its primitive can apply becomes its post-ops (:func:`plan_post_ops`): one pass
over the tensor instead of one per node."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper


def _scalar_consts(graph) -> dict[str, float]:
    out = {}
    for t in graph.initializer:
        arr = numpy_helper.to_array(t)
        if arr.size == 1:
            out[t.name] = float(arr.reshape(()))
    for n in graph.node:
        if n.op_type == "Constant" and len(n.attribute) == 1:
            a = n.attribute[0]
            if a.name == "value" and np.prod(a.t.dims, dtype=np.int64) == 1:
                out[n.output[0]] = float(numpy_helper.to_array(a.t).reshape(()))
            elif a.name == "value_float":
                out[n.output[0]] = float(a.f)
    return out


def fuse_gelu(graph) -> list:
    """The graph's nodes with every exact-GELU subgraph replaced by a Gelu node."""
    nodes = list(graph.node)
    consts = _scalar_consts(graph)
    producer = {o: n for n in nodes for o in n.output}
    uses: dict[str, int] = {}
    for n in nodes:
        for i in n.input:
            uses[i] = uses.get(i, 0) + 1
    for o in graph.output:
        uses[o.name] = uses.get(o.name, 0) + 1

    def near(name, value):
        return name in consts and abs(consts[name] - value) < 1e-4 * abs(value)

    def other(node, name):
        a, b = node.input
        return b if a == name else a if b == name else None

    def sole_user(name):
        users = [n for n in nodes if name in n.input]
        return users[0] if uses.get(name, 0) == 1 and len(users) == 1 else None

    drop, replace = set(), {}
    for erf in nodes:
        if erf.op_type != "Erf":
            continue
        div = producer.get(erf.input[0])
        if div is None or div.op_type != "Div" or not near(div.input[1], np.sqrt(2.0)):
            continue
        x = div.input[0]
        add = sole_user(erf.output[0])
        if add is None or add.op_type != "Add" or not near(other(add, erf.output[0]), 1.0):
            continue
        mul_x = sole_user(add.output[0])
        if mul_x is None or mul_x.op_type != "Mul" or other(mul_x, add.output[0]) != x:
            continue
        half = sole_user(mul_x.output[0])
        if half is None or half.op_type != "Mul" or not near(other(half, mul_x.output[0]), 0.5):
            continue
        drop.update(id(n) for n in (div, erf, add, mul_x))
        replace[id(half)] = helper.make_node("Gelu", [x], [half.output[0]],
                                             name=half.name or half.output[0])
    if not replace:
        return nodes
    return [replace.get(id(n), n) for n in nodes if id(n) not in drop]


#: producers whose primitives take post-ops (fused into their stores)
POST_OP_PRODUCERS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
#: binary operators a post-op can apply: dst = dst op src1 (the producer's side first for
#: the ones that do not commute)
_BINARY = {"Add": ("binary_add", True), "Mul": ("binary_mul", True),
           "Max": ("binary_max", True), "Min": ("binary_min", True),
           "Sub": ("binary_sub", False), "Div": ("binary_div", False)}


def plan_post_ops(b, producer, dst_shape: tuple | None) -> list:
    """The chain of nodes after ``producer`` that its primitive can apply as post-ops, marked
    fused in ``b``: ``("eltwise", alg, alpha, beta)`` for an activation, ``("binary", alg,
    Value)`` for an arithmetic node whose other operand exists already (computed earlier or
    constant) and broadcasts into ``dst_shape`` (None: no binary post-ops). Each step's input
    must feed only that node and not be a graph output."""
    from .. import algorithm
    from .graph import attributes
    from .ops.elementwise import POST_OP_ACTIVATIONS, post_op_of

    chain = []
    outs = [o for o in producer.output if o]
    if len(outs) != 1:
        return chain
    cur = outs[0]
    while True:
        users = b.users.get(cur, [])
        if len(users) != 1 or cur in b.graph_outputs or len(users[0].output) != 1:
            break
        node = users[0]
        if node.op_type in POST_OP_ACTIVATIONS and node.input[0] == cur:
            entry = post_op_of(node, attributes(node))
            if entry is None:
                break
            chain.append(("eltwise",) + entry)
        elif node.op_type in _BINARY and len(node.input) == 2 and dst_shape is not None:
            alg, commutes = _BINARY[node.op_type]
            if node.input[0] == cur and node.input[1] != cur:
                other = node.input[1]
            elif node.input[1] == cur and commutes and node.input[0] != cur:
                other = node.input[0]
            else:
                break
            value = b.value_of(other)
            if value is None or len(value.shape) > len(dst_shape) or any(
                    d not in (1, t) for d, t in zip(value.shape[::-1], dst_shape[::-1])):
                break
            chain.append(("binary", getattr(algorithm, alg), value.ranked(len(dst_shape))))
        else:
            break
        b.fused[id(node)] = producer
        cur = node.output[0]
    return chain
