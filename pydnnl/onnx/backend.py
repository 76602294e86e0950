"""``onnx.backend.base.Backend`` on pydnnl primitives."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep

from .. import engine, stream
from .errors import onnx_invalid
from .graph import NeedsInputValues, Program, build


def _engine(device: str) -> engine:
    """``"CPU"`` (the default) or ``"GPU"`` (also ``"CUDA"``, ``"GPU:1"``) -> pydnnl engine."""
    text = str(device).upper()
    kind_name, _, index = text.partition(":")
    if kind_name not in ("CPU", "GPU", "CUDA"):
        raise onnx_invalid(f"device: expected 'CPU' or 'GPU' (optionally ':index'), got "
                           f"{device!r}")
    kind = engine.kind.cpu if kind_name == "CPU" else engine.kind.gpu
    return engine(kind, int(index) if index else 0)


class Outputs(tuple):
    """The outputs in graph order, also indexable by output name (ONNX output names need not
    be Python identifiers, so this is no namedtuple)."""

    def __new__(cls, names: list[str], values: list[np.ndarray]):
        out = super().__new__(cls, values)
        out._index = {n: i for i, n in enumerate(names)}
        return out

    def __getitem__(self, key):
        if isinstance(key, str):
            if key not in self._index:
                raise onnx_invalid(f"outputs: no output named {key!r}; the model's outputs "
                                   f"are {list(self._index)}")
            key = self._index[key]
        return super().__getitem__(key)


class PydnnlBackendRep(BackendRep):
    """A prepared model: primitives for one input signature, created once.

    A model whose input shapes are all static is built in ``prepare``. One that reads graph
    inputs as parameters (a Reshape's shape, Reduce axes, Clip bounds, RNN weights fed as
    inputs) or has symbolic dims is built at the first ``run`` and again for each new input
    shape or parameter value (each kept).
    """

    def __init__(self, model: onnx.ModelProto, device: str = "CPU"):
        self.model = model
        self.engine = _engine(device)
        self.stream = stream(self.engine)
        inits = {t.name for t in model.graph.initializer}
        self.input_names = [vi.name for vi in model.graph.input if vi.name not in inits]
        self.output_names = [vi.name for vi in model.graph.output]
        self._programs: dict[Any, Program] = {}
        self._params: set[str] = set()
        try:
            self._programs[None] = build(self.engine, self.stream, model, None)
        except NeedsInputValues:
            pass

    def inputs_dict(self, inputs: Any) -> dict[str, np.ndarray]:
        """``inputs`` (a list in graph order, one array, or a dict) as {name: array}, checked
        against the declared shapes."""
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) > len(self.input_names):
                raise onnx_invalid(f"run: the model has {len(self.input_names)} inputs "
                                   f"{self.input_names}, got {len(inputs)} arrays")
            feeds = dict(zip(self.input_names, inputs))
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise onnx_invalid(f"run: inputs {missing} were not given")
        feeds = {k: np.asarray(v) for k, v in feeds.items()}
        for vi in self.model.graph.input:
            if vi.name not in feeds or not vi.type.tensor_type.HasField("shape"):
                continue
            dims = [d.dim_value if d.HasField("dim_value") else None
                    for d in vi.type.tensor_type.shape.dim]
            got = feeds[vi.name].shape
            if len(dims) != len(got) or any(d is not None and d != g for d, g in zip(dims, got)):
                want = ["?" if d is None else d for d in dims]
                raise onnx_invalid(f"graph input '{vi.name}': expected shape {want}, got "
                                   f"{list(got)}")
        return feeds

    def program(self, feeds: dict[str, np.ndarray]) -> Program:
        """The program for these inputs' shapes and parameter values (built if new)."""
        static = self._programs.get(None)
        if static is not None and all(
                feeds[n].shape == v.shape for n, v in static.inputs.items()):
            return static
        key = tuple((n, feeds[n].shape, feeds[n].dtype.str,
                     feeds[n].tobytes() if n in self._params else None)
                    for n in self.input_names)
        prog = self._programs.get(key)
        if prog is None:
            prog = build(self.engine, self.stream, self.model, feeds)
            if not prog.params <= self._params:
                # keys now include these parameters' values: rekey for the next lookups
                self._params |= prog.params
                key = tuple((n, feeds[n].shape, feeds[n].dtype.str,
                             feeds[n].tobytes() if n in self._params else None)
                            for n in self.input_names)
            self._programs[key] = prog
        return prog

    def run(self, inputs: Any, timings: list | None = None, **kwargs: Any) -> tuple:
        """Outputs in graph order (a tuple also indexable by output name).

        ``timings``: a list that receives ``(node name, op_type, seconds)`` per node (the
        stream is waited on after each node; seconds is None for views, constants and fused
        activations, which run nothing of their own)."""
        feeds = self.inputs_dict(inputs)
        outs = self.program(feeds).run(feeds, timings)
        return Outputs(self.output_names, outs)


class PydnnlBackend(Backend):
    """ONNX graphs on pydnnl primitives; ``device`` is ``"CPU"`` (default) or ``"GPU"``."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU",
                **kwargs: Any) -> PydnnlBackendRep:
        try:
            onnx.checker.check_model(model)
        except onnx.checker.ValidationError as e:
            raise onnx_invalid(f"prepare: the model is not valid ONNX: {e}") from None
        return PydnnlBackendRep(model, device)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Sequence[np.ndarray], device: str = "CPU",
                 outputs_info=None, **kwargs: Any) -> tuple:
        """Run one node on ``inputs`` (one array per non-empty input name, in order)."""
        names = [n for n in node.input if n]
        if len(inputs) != len(names):
            raise onnx_invalid(f"run_node: {node.op_type} node has {len(names)} inputs, got "
                               f"{len(inputs)} arrays")
        arrays = [np.asarray(a) for a in inputs]
        ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                             a.shape) for n, a in zip(names, arrays)]
        outs = [onnx.ValueInfoProto(name=n) for n in node.output if n]
        if outputs_info is not None:
            outs = [helper.make_tensor_value_info(
                        n, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shape)
                    for n, (dt, shape) in zip([n for n in node.output if n], outputs_info)]
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        model = helper.make_model(helper.make_graph([node], "run_node", ins, outs),
                                  opset_imports=[helper.make_opsetid("", opset)])
        return PydnnlBackendRep(model, device).run(arrays)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """Whether a pydnnl device of that kind exists (``"CPU"``, ``"GPU"``/``"CUDA"``)."""
        kind_name = str(device).upper().partition(":")[0]
        if kind_name not in ("CPU", "GPU", "CUDA"):
            return False
        k = engine.kind.cpu if kind_name == "CPU" else engine.kind.gpu
        return engine.get_count(k) > 0


prepare = PydnnlBackend.prepare
run_model = PydnnlBackend.run_model
run_node = PydnnlBackend.run_node
supports_device = PydnnlBackend.supports_device
