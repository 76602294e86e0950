"""Graph rewrites before the build. Exact GELU as the TorchScript exporter writes it before
opset 20, ``Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)`` (either operand order per node),
becomes one Gelu node (``eltwise_gelu_erf``; there is no erf primitive to run Erf alone).
An activation whose input is a Conv, ConvTranspose, Gemm or MatMul output used nowhere else
is fused into that primitive as an eltwise post-op (one pass over the tensor instead of
two)."""
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


#: producers whose primitives take eltwise post-ops (fused into their stores)
POST_OP_PRODUCERS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def fusable_activations(nodes, graph_outputs: set[str], activation_ops) -> dict[int, object]:
    """Activation nodes to fold into their producer as an eltwise post-op: {id(activation
    node): producer node}. The producer's output must feed only that activation and not be a
    graph output."""
    producer = {n.output[0]: n for n in nodes if n.output}
    uses: dict[str, int] = {}
    for n in nodes:
        for i in n.input:
            uses[i] = uses.get(i, 0) + 1
    out = {}
    for n in nodes:
        if n.op_type not in activation_ops or not n.input:
            continue
        p = producer.get(n.input[0])
        if (p is not None and p.op_type in POST_OP_PRODUCERS and uses[n.input[0]] == 1
                and n.input[0] not in graph_outputs and len([o for o in p.output if o]) == 1):
            out[id(n)] = p
    return out
