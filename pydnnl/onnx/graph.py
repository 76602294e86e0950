"""Walking an ONNX graph once: every node becomes primitives created here, executed in order
by a :class:`Program`. Nothing is created or compiled when a program runs."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from .. import memory, reorder
from ..constants import ARG_FROM, ARG_TO
from ..engine import engine as _engine
from ..stream import stream as _stream
from .errors import invalid, node_label, onnx_invalid, onnx_unsupported, unsupported
from .tensors import BOOL, FLOAT, Value, plain_md, to_numpy


class NeedsInputValues(Exception):
    """A node needs the value of a graph input (a shape, axes, ...) that prepare does not
    have yet: the program is built at the first run instead."""


@dataclass
class Step:
    """One node's work: ``fn(stream)`` enqueues its primitives (None: no work of its own, a
    view or an activation fused into its producer, as ``note`` says)."""

    name: str
    op_type: str
    fn: Callable[[_stream], None] | None
    note: str = ""


def attributes(node) -> dict[str, Any]:
    """A node's attributes as Python values (strings decoded)."""
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [s.decode() for s in v]
        out[a.name] = v
    return out


def static_shape(vi) -> tuple[int, ...] | None:
    """The dims of a graph input's declared type, or None when one is symbolic."""
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    dims = []
    for d in t.shape.dim:
        if not d.HasField("dim_value"):
            return None
        dims.append(int(d.dim_value))
    return tuple(dims)


class Builder:
    """What the op mappings see while a program is built: constants, device values, the
    engine, and where to append steps."""

    def __init__(self, eng: _engine, strm: _stream, graph, opset: int,
                 feeds: dict[str, np.ndarray] | None):
        self.engine, self.stream, self.opset = eng, strm, opset
        self.feeds = feeds
        self.consts: dict[str, np.ndarray] = {
            t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.inputs = {vi.name: vi for vi in graph.input if vi.name not in self.consts}
        self.values: dict[str, Value] = {}
        self.params: set[str] = set()   # graph inputs read as host values (shapes, axes, ...)
        self.steps: list[Step] = []
        self.input_values: dict[str, Value] = {}
        self.node = None
        self.fused: dict[int, Any] = {}        # id(node) -> the producer applying it
        self.users: dict[str, list] = {}       # tensor name -> nodes reading it
        self.graph_outputs = {o.name for o in graph.output}
        # buffer reuse: a node's output may take the buffer of a tensor no later node reads
        self.last_use: dict[str, float] = {}   # tensor name -> index of its last reader
        self._index = -1
        self._freeable: set[int] = set()       # id of owner Values alloc() made for nodes
        self._alive: dict[int, set[str]] = {}  # id(owner) -> names still to be read
        self._owners: dict[int, Value] = {}
        self._free: list[Value] = []
        self.nbytes = 0                        # device bytes alloc() took fresh
        for name, vi in self.inputs.items():
            if vi.type.tensor_type.elem_type != FLOAT:
                continue    # host-only (int64 shapes, axes, lengths) unless a node needs it
            shape = (tuple(feeds[name].shape) if feeds is not None and name in feeds
                     else static_shape(vi))
            if shape is None:
                raise NeedsInputValues(name)
            v = self.alloc(shape)
            self.values[name] = self.input_values[name] = v

    # -- inputs of the current node --------------------------------------------------------
    def has(self, i: int) -> bool:
        """Whether the current node's optional input ``i`` is given."""
        return i < len(self.node.input) and self.node.input[i] != ""

    def const(self, i: int, what: str) -> np.ndarray | None:
        """Input ``i`` of the current node as a host array (None when absent). It must be a
        constant or a graph input; a graph input becomes a parameter of the program."""
        if not self.has(i):
            return None
        name = self.node.input[i]
        if name in self.consts:
            return self.consts[name]
        if name in self.inputs:
            if self.feeds is None:
                raise NeedsInputValues(name)
            if name not in self.feeds:
                raise onnx_invalid(f"graph input '{name}' was not given")
            self.params.add(name)
            return np.asarray(self.feeds[name])
        raise unsupported(self.node, f"{what} (input {i}, '{name}') must be a constant or a "
                                     f"graph input; here another node computes it")

    def value(self, i: int, what: str = "") -> Value:
        """Input ``i`` of the current node as a device tensor (constants are uploaded once)."""
        if not self.has(i):
            raise invalid(self.node, f"input {i} ({what or 'data'}) is missing")
        name = self.node.input[i]
        if name in self.values:
            return self.values[name]
        if name in self.consts:
            arr = self.consts[name]
            if arr.dtype != np.float32:
                raise unsupported(self.node, f"input {i} ('{name}') has data type {arr.dtype}; "
                                             f"the backend computes in float32 only")
            v = self.alloc(arr.shape, reuse=False)     # weights stay for every run
            v.mem.write(arr.reshape(v.md.get_dims()))
            self.values[name] = v
            return v
        if name in self.inputs:
            et = self.inputs[name].type.tensor_type.elem_type
            raise unsupported(self.node, f"input {i} ('{name}') has data type "
                                         f"{TensorProto.DataType.Name(et)}; the backend "
                                         f"computes in float32 only")
        raise onnx_invalid(f"{node_label(self.node)}: input '{name}' is not produced by any "
                           f"node before it")

    def bool_value(self, i: int, what: str) -> Value:
        """Input ``i`` as a device bool tensor (0.0 / 1.0 in f32, as comparisons write it): a
        computed tensor, or a bool graph input, which becomes a device input of the program
        (constants are the caller's, on the host)."""
        name = self.node.input[i] if self.has(i) else ""
        vi = self.inputs.get(name)
        if name in self.values or vi is None:
            return self.value(i, what)
        et = vi.type.tensor_type.elem_type
        if et != BOOL:
            raise unsupported(self.node, f"input {i} ('{name}', {what}) has data type "
                                         f"{TensorProto.DataType.Name(et)}; expected bool")
        shape = (tuple(self.feeds[name].shape) if self.feeds is not None and name in self.feeds
                 else static_shape(vi))
        if shape is None:
            raise NeedsInputValues(name)
        v = self.alloc(shape, BOOL, reuse=False)
        self.values[name] = self.input_values[name] = v
        return v

    def is_const(self, i: int) -> bool:
        return self.has(i) and self.node.input[i] in self.consts

    # -- outputs ---------------------------------------------------------------------------
    def alloc(self, shape, elem_type: int = FLOAT, reuse: bool = True) -> Value:
        """A new plain tensor; for a node's result, on the buffer of a dead tensor when one
        is large enough (the in-order stream runs the steps one after another)."""
        shape = tuple(int(d) for d in shape)
        if any(d <= 0 for d in shape):
            where = node_label(self.node) if self.node is not None else "graph input"
            raise onnx_unsupported(f"{where}: empty tensor of shape {list(shape)} (pydnnl "
                                   f"memories need at least one element)")
        md = plain_md(shape)
        if not reuse or self.node is None:
            self.nbytes += md.get_size()
            return Value(memory(md, self.engine), shape, elem_type)
        fits = [v for v in self._free if v.mem.get_desc().get_size() >= md.get_size()]
        if fits:
            owner = min(fits, key=lambda v: v.mem.get_desc().get_size())
            self._free.remove(owner)
            return Value(memory(md, self.engine, owner.mem.get_data_handle()), shape,
                         elem_type, owner)
        self.nbytes += md.get_size()
        v = Value(memory(md, self.engine), shape, elem_type)
        self._freeable.add(id(v))
        self._owners[id(v)] = v
        return v

    def set(self, i: int, v: "Value | np.ndarray") -> None:
        """Output ``i`` of the current node (a host array for constants)."""
        if i >= len(self.node.output) or not self.node.output[i]:
            return
        name = self.node.output[i]
        if isinstance(v, (np.ndarray, np.generic)):
            self.consts[name] = np.asarray(v)
        else:
            self.values[name] = v
            owner = v.base or v
            if id(owner) in self._freeable:
                self._alive.setdefault(id(owner), set()).add(name)

    def wants(self, i: int) -> bool:
        """Whether the current node's output ``i`` is used."""
        return i < len(self.node.output) and self.node.output[i] != ""

    # -- work ------------------------------------------------------------------------------
    def execute(self, prim, args: dict) -> None:
        """Append one primitive execution to the current node's step."""
        self._fns.append(lambda s, p=prim, a=args: p.execute(s, a))

    def copy(self, src: Value, dst: Value) -> None:
        """A reorder of ``src``'s layout into ``dst``'s (transposes, gathers of views)."""
        self.execute(reorder(src.mem, dst.mem), {ARG_FROM: src.mem, ARG_TO: dst.mem})

    def run_once(self, prim, args: dict) -> None:
        """Execute a primitive now (weight repacking at prepare)."""
        prim.execute(self.stream, args)
        self.stream.wait()

    def value_of(self, name: str) -> Value | None:
        """The device tensor ``name`` if it exists yet (a float constant is uploaded)."""
        if name in self.values:
            return self.values[name]
        arr = self.consts.get(name)
        if arr is None or arr.dtype != np.float32:
            return None
        v = self.alloc(arr.shape, reuse=False)
        v.mem.write(arr.reshape(v.md.get_dims()))
        self.values[name] = v
        return v

    def begin(self, node) -> None:
        self.node, self._fns, self._note = node, [], "view"
        self._index += 1

    def _release_dead(self) -> None:
        """After the current node: tensors no later node reads give their buffers back."""
        for name in list(self.node.input) + list(self.node.output):
            if not name or self.last_use.get(name, -1) > self._index or name not in self.values:
                continue
            v = self.values[name]
            owner = v.base or v
            alive = self._alive.get(id(owner))
            if alive is None:
                continue
            alive.discard(name)
            if not alive:
                del self._alive[id(owner)]
                self._free.append(self._owners[id(owner)])

    def end(self) -> None:
        fns, fn = self._fns, None
        if fns:
            def fn(s, fns=fns):
                for f in fns:
                    f(s)
        self.steps.append(Step(self.node.name or self.node.output[0], self.node.op_type, fn,
                               "" if fns else self._note))
        self._release_dead()


@dataclass
class Program:
    """The primitives of one graph for one set of input shapes (and parameter values)."""

    stream: _stream
    steps: list[Step]
    inputs: dict[str, Value]
    outputs: list[tuple[str, Any, int]]     # name, Value or host array, ONNX element type
    params: set[str] = field(default_factory=set)
    nbytes: int = 0     # device memory of its tensors (inputs, constants, results, temporaries)

    def run(self, feeds: dict[str, np.ndarray], timings: list | None = None) -> list[np.ndarray]:
        for name, v in self.inputs.items():
            arr = np.asarray(feeds[name])
            if tuple(arr.shape) != v.shape:
                raise onnx_invalid(f"graph input '{name}': expected shape {list(v.shape)}, "
                                   f"got {list(arr.shape)}")
            want = np.bool_ if v.elem_type == BOOL else np.float32
            if arr.dtype != want:
                raise onnx_invalid(f"graph input '{name}': expected {np.dtype(want)} data, got "
                                   f"{arr.dtype}")
            v.mem.write(arr.reshape(v.md.get_dims()).astype(np.float32, copy=False))
        s = self.stream
        for step in self.steps:
            if step.fn is None:
                if timings is not None:
                    timings.append((step.name, step.op_type, None))
            elif timings is None:
                step.fn(s)
            else:
                t0 = time.perf_counter()
                step.fn(s)
                s.wait()
                timings.append((step.name, step.op_type, time.perf_counter() - t0))
        s.wait()
        out = []
        for _name, v, et in self.outputs:
            if isinstance(v, Value):
                out.append(to_numpy(v))
            else:
                arr = np.asarray(v)
                out.append(arr.astype(bool) if et == BOOL else arr)
        return out


def build(eng: _engine, strm: _stream, model, feeds: dict[str, np.ndarray] | None) -> Program:
    """Create every node's primitives (raises :class:`NeedsInputValues` when a shape or a
    parameter needs input data that ``feeds`` does not carry)."""
    from .fuse import fuse_gelu
    from .ops import HANDLERS

    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    b = Builder(eng, strm, graph, opset, feeds)
    nodes = fuse_gelu(graph)
    for k, node in enumerate(nodes):
        for name in node.input:
            b.last_use[name] = k
            b.users.setdefault(name, []).append(node)
    for o in graph.output:
        b.last_use[o.name] = float("inf")
    for node in nodes:
        if node.domain not in ("", "ai.onnx"):
            raise unsupported(node, f"operator domain '{node.domain}' is not supported")
        handler = HANDLERS.get(node.op_type)
        if handler is None:
            raise unsupported(node, "operator not supported by the pydnnl ONNX backend")
        b.begin(node)
        if id(node) in b.fused:
            # the producer's primitive applied it: its output is this node's output
            producer = b.fused[id(node)]
            b.set(0, b.values[producer.output[0]])
            b._note = f"fused into {producer.name or producer.output[0]}"
        else:
            handler(b, node, attributes(node))
        b.end()
    outputs = []
    for vi in graph.output:
        et = vi.type.tensor_type.elem_type
        if vi.name in b.values:
            outputs.append((vi.name, b.values[vi.name], et))
        elif vi.name in b.consts:
            outputs.append((vi.name, b.consts[vi.name], et))
        else:
            raise onnx_invalid(f"graph output '{vi.name}' is produced by no node")
    return Program(strm, b.steps, b.input_values, outputs, b.params, b.nbytes)
