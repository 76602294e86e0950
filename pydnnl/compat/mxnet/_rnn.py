"""``rnn``: MXNet's functional RNN operator (``mxnet.npx.rnn``) on pydnnl primitives.

Each call is one *problem* (configuration, shapes and the layouts of the tensors passed).
The first call of a problem builds a plan and caches it: the RNN primitives, the reorders that
move the weights out of MXNet's flat ``parameters`` vector into the layouts the primitives
chose, and a 1x1 convolution that adds MXNet's two bias vectors per gate (oneDNN cells take
one). Later calls of the same problem only enqueue: the weights are translated again on the
device every call (they change every training step), never through the host.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ... import constants as _c
from ...engine import engine as _engine
from ...error import error, invalid_arguments, unimplemented
from ...memory import memory
from ...memory.data_types import data_type
from ...memory.desc import MemoryDesc
from ...primitives import (
    convolution_forward,
    lbr_gru_forward,
    lstm_forward,
    reorder,
    vanilla_rnn_forward,
)
from ...primitives.rnn.extensions import rnn_extensions
from ...primitives.sequence import Bind, PrimitiveSequence
from ...stream import stream as _stream
from .._gates import gate_runs
from ._packing import RnnPacking

_F32 = data_type.f32
_TAG = memory.format_tag

# MXNet mode -> (primitive, activation, MXNet gate block feeding each oneDNN gate)
# LSTM gates are i, f, g, o in both; MXNet GRU r, z, n -> oneDNN u(=z), r, o(=n).
_CELLS = {
    "rnn_relu": (vanilla_rnn_forward, _c.algorithm.eltwise_relu, (0,)),
    "rnn_tanh": (vanilla_rnn_forward, _c.algorithm.eltwise_tanh, (0,)),
    "lstm": (lstm_forward, None, (0, 1, 2, 3)),
    "gru": (lbr_gru_forward, None, (1, 0, 2)),
}

_CACHE_CAPACITY = 32


# ------------------------------------------------------------------------------------------------
# grouping of layers into primitives
# ------------------------------------------------------------------------------------------------
def group_layers(pk: RnnPacking, cell_clip: tuple[float, float] | None = None,
                 cell_clip_nan: bool = False,
                 seq_lengths: tuple[int, ...] | None = None,
                 dropout: float = 0.0) -> list[tuple[range, rnn_extensions]]:
    """The layers each RNN primitive runs, bottom to top, and the extensions it runs them with.

    One primitive runs each run of consecutive layers with the same input size (layer 0 alone
    unless its input size is the layers' output size): a oneDNN stack for unidirectional
    layers; for bidirectional ones the per-layer bidirectional extension (both directions of
    layer l + 1 read both of layer l, as in MXNet). A group's top output feeds the next group.
    With dropout every group draws from its own Philox key (its index), and all but the last
    drop their own top output too.
    """
    ext = rnn_extensions(layer_bidirectional=pk.directions == 2, cell_clip=cell_clip,
                         cell_clip_nan=cell_clip_nan, seq_lengths=seq_lengths)
    L = pk.num_layers
    groups, start = [], 0
    for l in range(1, L):
        if pk.layer_input(l) != pk.layer_input(start):
            groups.append(range(start, l))
            start = l
    groups.append(range(start, L))
    if not dropout:
        return [(g, ext) for g in groups]
    # dropout on every layer's output but the network's last: a group that is not the last
    # drops its own top output too; each group draws from its own Philox key (its index)
    from dataclasses import replace

    return [(g, replace(ext, dropout=dropout, dropout_seed=i,
                        dropout_output=i < len(groups) - 1)) for i, g in enumerate(groups)]


# ------------------------------------------------------------------------------------------------
# descriptors of views into user buffers
# ------------------------------------------------------------------------------------------------
def _view(base: MemoryDesc, offset: int, dims, strides) -> MemoryDesc:
    """A strided view of the 1-D ``base`` desc: element ``offset + sum(i_k * strides[k])``."""
    (step,) = base.strides
    md = MemoryDesc(list(dims), base.data_type, [s * step for s in strides])
    md.offset0 = base.offset0 + offset * step
    return md


def _state_view(md: MemoryDesc, L: int, D: int, layers: range, name: str) -> MemoryDesc:
    """The [Lg, D, N, C] part of an MXNet state tensor [L*D, N, C] for ``layers``."""
    _, N, C = md.dims
    try:
        full = md.reshape([L, D, N, C])
    except error:
        raise invalid_arguments(
            f"mxnet.rnn: {name} must have a layout that splits its first dimension into "
            f"[num_layers, directions] (a plain one such as abc), got {md!r}") from None
    return full.submemory_desc([len(layers), D, N, C], [layers.start, 0, 0, 0])


@dataclass(frozen=True)
class _Problem:
    engine: _engine
    packing: RnnPacking
    T: int
    N: int
    state_outputs: bool
    data_md: MemoryDesc
    params_md: MemoryDesc
    state_md: MemoryDesc
    cell_md: MemoryDesc | None
    cell_clip: tuple[float, float] | None
    cell_clip_nan: bool
    seq_lengths: tuple[int, ...] | None = None
    dropout: float = 0.0  # p, in training only


class _Translation:
    """One problem in pydnnl's terms: its primitives, and the runtime plan that runs them
    over the call's tensors (bound by name: params, data, state, cell, out, hy, cy)."""

    def __init__(self, prob: _Problem):
        self.prob = prob
        self.lock = threading.Lock()
        self.last_stream = None
        self.plan = PrimitiveSequence(prob.engine, "mxnet.rnn")
        self.primitives = 0
        eng, pk = prob.engine, prob.packing
        T, N, L, D, H, G = prob.T, prob.N, pk.num_layers, pk.directions, pk.state_size, pk.gates
        R, P = pk.rec_size, pk.projection_size
        prim_cls, act, gate_src = _CELLS[pk.mode]
        lstm = pk.mode == "lstm"
        Gb = 4 if pk.mode == "gru" else G
        pm = prob.params_md
        direction = (_c.rnn_direction.bidirectional_concat if D == 2
                     else _c.rnn_direction.unidirectional_left2right)
        md = lambda dims, tag=_TAG.any: MemoryDesc(dims, _F32, tag)  # noqa: E731
        self.out_md = md([T, N, D * R], _TAG.tnc)
        self.hy_md = md([L * D, N, R], _TAG.abc)
        self.cy_md = md([L * D, N, H], _TAG.abc) if lstm else None

        # MXNet adds an i2h and an h2h bias per gate; oneDNN cells take one (LBR-GRU keeps the
        # two n-gate biases apart). One 1x1 convolution with weights [1, 1] sums the pairs of
        # every layer and direction: batch = L*D, channels = (i2h, h2h), width = the summed gates.
        summed = 2 * H if pk.mode == "gru" else G * H
        b0 = pk.bias_offset(0, 0, "i2h")
        sum_src = _view(pm, b0, [L * D, 2, 1, summed], [2 * G * H, G * H, summed, 1])
        ones_md = md([1, 2, 1, 1], _TAG.oihw)
        sums_md = md([L * D, 1, 1, summed], _TAG.nchw)
        cpd = convolution_forward.primitive_desc(
            eng, _c.prop_kind.forward_inference, _c.algorithm.convolution_direct, sum_src,
            ones_md, None, sums_md, [1, 1], [0, 0], [0, 0])
        self.sums = memory(cpd.dst_desc(), eng)
        self._add(convolution_forward(cpd),
                  {_c.ARG_SRC: Bind("params", sum_src),
                   _c.ARG_WEIGHTS: memory(ones_md, eng, np.ones((1, 2, 1, 1), np.float32)),
                   _c.ARG_DST: self.sums})
        sums_flat = md([L * D * summed], _TAG.a)

        self.groups = group_layers(pk, prob.cell_clip, prob.cell_clip_nan, prob.seq_lengths,
                                   prob.dropout)
        prop = (_c.prop_kind.forward_training if prob.dropout
                else _c.prop_kind.forward_inference)
        rnn_steps = []
        src_layer = Bind("data", prob.data_md)
        for gi, (layers, ext) in enumerate(self.groups):
            Lg, l0 = len(layers), layers.start
            top = gi == len(self.groups) - 1
            slc = pk.layer_input(l0)
            descs = {
                "src_layer_desc": (src_layer.md if isinstance(src_layer, Bind)
                                   else src_layer.get_desc()),
                "src_iter_desc": _state_view(prob.state_md, L, D, layers, "state"),
                "weights_layer_desc": md([Lg, D, slc, G, H]),
                "weights_iter_desc": md([Lg, D, R, G, H]),
                "bias_desc": md([Lg, D, Gb, H]),
                "dst_layer_desc": self.out_md if top else md([T, N, D * R], _TAG.tnc),
                "dst_iter_desc": (_state_view(self.hy_md, L, D, layers, "hy")
                                  if prob.state_outputs else None),
            }
            if lstm:
                descs["src_iter_c_desc"] = _state_view(prob.cell_md, L, D, layers, "state_cell")
                descs["dst_iter_c_desc"] = (_state_view(self.cy_md, L, D, layers, "cy")
                                            if prob.state_outputs else None)
                if P:
                    descs["weights_projection_desc"] = md([Lg, D, H, P])
            head = (eng, prop) + ((act,) if act is not None else ())
            pd = prim_cls.primitive_desc(*head, direction, **descs, extensions=ext)
            wl = memory(pd.weights_layer_desc(), eng)
            wi = memory(pd.weights_iter_desc(), eng)
            bias = memory(pd.bias_desc(), eng)

            # weights: MXNet [G*H, in] row-major per (layer, direction) is oneDNN's ldgoi; one
            # reorder per run of gates that keep their relative order
            lstride, dstride = pk.layer_stride(l0), pk.direction_stride(l0)
            for which, dst, k in (("i2h", wl, slc), ("h2h", wi, R)):
                base = pk.weight_offset(l0, 0, which)
                for j0, n in gate_runs(gate_src):
                    src = _view(pm, base + gate_src[j0] * H * k, [Lg, D, k, n, H],
                                [lstride, dstride, 1, H * k, k])
                    self._add_reorder(Bind("params", src), dst, [Lg, D, k, n, H], [0, 0, 0, j0, 0])
            if P:
                wp = memory(pd.weights_projection_desc(), eng)
                src = _view(pm, pk.weight_offset(l0, 0, "h2r"), [Lg, D, H, P],
                            [lstride, dstride, 1, H])
                self._add_reorder(Bind("params", src), wp, [Lg, D, H, P], [0, 0, 0, 0])

            # biases: the summed pairs, gates in oneDNN order; LBR-GRU's o and u' are MXNet's
            # i2h and h2h n-gate biases as they are
            first = l0 * D * summed
            for j0, n in gate_runs(gate_src[:2] if pk.mode == "gru" else gate_src):
                src = _view(sums_flat, first + gate_src[j0] * H, [Lg, D, n, H],
                            [D * summed, summed, H, 1])
                self._add_reorder(self.sums_view(src), bias, [Lg, D, n, H], [0, 0, j0, 0])
            if pk.mode == "gru":
                src = _view(pm, pk.bias_offset(l0, 0, "i2h") + 2 * H, [Lg, D, 2, H],
                            [D * 2 * G * H, 2 * G * H, G * H, 1])
                self._add_reorder(Bind("params", src), bias, [Lg, D, 2, H], [0, 0, 2, 0])

            args = {_c.ARG_SRC_LAYER: src_layer,
                    _c.ARG_SRC_ITER: Bind("state", descs["src_iter_desc"]),
                    _c.ARG_WEIGHTS_LAYER: wl, _c.ARG_WEIGHTS_ITER: wi, _c.ARG_BIAS: bias}
            if P:
                args[_c.ARG_WEIGHTS_PROJECTION] = wp
            if prob.dropout:  # forward_training: the masks live in the workspace
                args[_c.ARG_WORKSPACE] = memory(pd.workspace_desc(), eng)
            if lstm:
                args[_c.ARG_SRC_ITER_C] = Bind("cell", descs["src_iter_c_desc"])
            if prob.state_outputs:
                args[_c.ARG_DST_ITER] = Bind("hy", descs["dst_iter_desc"])
                if lstm:
                    args[_c.ARG_DST_ITER_C] = Bind("cy", descs["dst_iter_c_desc"])
            if top:
                args[_c.ARG_DST_LAYER] = Bind("out", self.out_md)
            else:  # kept by the plan: the next group reads it
                src_layer = args[_c.ARG_DST_LAYER] = memory(pd.dst_layer_desc(), eng)
            rnn_steps.append((prim_cls(pd), args))
            self.primitives += 1
        # every weight translation first, so that the RNN primitives run back to back
        for prim, args in rnn_steps:
            self.plan.add(prim, args)

    def sums_view(self, md: MemoryDesc) -> memory:
        return memory(md, self.prob.engine, self.sums.get_data_handle())

    def _add(self, prim, args: dict) -> None:
        self.plan.add(prim, args)
        self.primitives += 1

    def _add_reorder(self, src, dst: memory, dims, offsets) -> None:
        dmd = dst.get_desc()
        if list(dims) != dmd.get_dims():
            dmd = dmd.submemory_desc(dims, offsets)
            dst = memory(dmd, self.prob.engine, dst.get_data_handle())
        smd = src.md if isinstance(src, Bind) else src.get_desc()
        pd = reorder.primitive_desc(self.prob.engine, smd, self.prob.engine, dmd)
        self._add(reorder(pd), {_c.ARG_FROM: src, _c.ARG_TO: dst})

    def execute(self, s: _stream, bound: dict[str, memory]) -> None:
        with self.lock:
            # the plan's own buffers (translated weights, inner layers' outputs) are reused by
            # every call: work of an earlier call on another stream must be done first
            if self.last_stream is not None and self.last_stream is not s:
                self.last_stream.wait()
            self.last_stream = s
            self.plan.run(s, bound)


# ------------------------------------------------------------------------------------------------
# the plan cache
# ------------------------------------------------------------------------------------------------
_cache: "OrderedDict[_Problem, _Translation]" = OrderedDict()
_cache_lock = threading.Lock()
_stats = {"primitives": 0}
_streams: dict = {}
_default_engine: list = []


def cache_info() -> dict:
    """``{"problems": plans cached, "primitives": primitives created since the last clear}``."""
    with _cache_lock:
        return {"problems": len(_cache), "primitives": _stats["primitives"]}


def cache_clear() -> None:
    """Drop every cached plan (and its primitives)."""
    with _cache_lock:
        _cache.clear()
        _stats["primitives"] = 0


def _plan_for(prob: _Problem) -> _Translation:
    with _cache_lock:
        plan = _cache.get(prob)
        if plan is not None:
            _cache.move_to_end(prob)
            return plan
    plan = _Translation(prob)  # outside the lock: building compiles kernels
    with _cache_lock:
        if prob in _cache:  # another thread built it meanwhile
            return _cache[prob]
        _cache[prob] = plan
        _stats["primitives"] += plan.primitives
        while len(_cache) > _CACHE_CAPACITY:
            _cache.popitem(last=False)
    return plan


# ------------------------------------------------------------------------------------------------
# the operator
# ------------------------------------------------------------------------------------------------
def _as_tensor(value, name: str):
    """A pydnnl.memory as is, or a numpy array of a real floating type."""
    if isinstance(value, memory):
        dt = value.get_desc().data_type
        if dt != _F32:
            raise unimplemented(f"mxnet.rnn: {name} must be f32, got {dt.name}")
        return value
    try:
        arr = np.asarray(value)
    except Exception:
        raise invalid_arguments(
            f"mxnet.rnn: {name} must be a numpy array or a pydnnl.memory, got "
            f"{type(value).__name__}") from None
    if arr.dtype.kind != "f":
        raise invalid_arguments(
            f"mxnet.rnn: {name} must hold floating-point values, got dtype {arr.dtype}")
    return arr


def _dims(t) -> list[int]:
    return t.get_desc().get_dims() if isinstance(t, memory) else list(t.shape)


def _check_dims(t, name: str, expected: list[int], what: str) -> None:
    if _dims(t) != expected:
        raise invalid_arguments(
            f"mxnet.rnn: {name} must have shape {what} = {expected}, got {_dims(t)}")


def rnn(data, parameters, state, state_cell=None, sequence_length=None, mode=None,
        state_size=None, num_layers=None, bidirectional=False, state_outputs=False, p=0.0,
        use_sequence_length=False, projection_size=None, lstm_state_clip_min=None,
        lstm_state_clip_max=None, lstm_state_clip_nan=False, training=False, engine=None,
        stream=None):
    """MXNet's ``npx.rnn`` forward: ``out``, or ``[out, hy]`` / ``[out, hy, cy]`` with
    ``state_outputs``.

    ``data`` [T, N, I], ``state`` [L*D, N, R] (R = projection_size or state_size),
    ``state_cell`` [L*D, N, state_size] (LSTM only), ``parameters`` the flat vector of
    :func:`rnn_param_size` elements in MXNet's packing. Tensors are numpy arrays or f32
    ``pydnnl.memory`` objects (any mix); results are ``pydnnl.memory`` when ``data`` is one,
    else numpy float32 arrays. The device is the memories' engine, else ``engine``, else the
    default CPU engine. ``stream`` (a pydnnl extension) makes the call enqueue on that in-order
    stream and return without waiting when the results are memories; by default the call waits.
    ``lstm_state_clip_min/max`` clamp the LSTM cell state at every step (``lstm_state_clip_nan``:
    a NaN becomes the minimum). ``use_sequence_length`` with ``sequence_length`` (N integers,
    any order) gives cuDNN padded-IO semantics: zeros after each sequence's end, ``hy``/``cy``
    at each sequence's last step. ``training=True`` with ``p > 0`` drops out every layer's
    output but the last (Philox masks on the device, a new mask every call); ``p`` is ignored
    when not training, as in MXNet.
    """
    # -- configuration ---------------------------------------------------------------------------
    if mode is None or state_size is None or num_layers is None:
        raise invalid_arguments(
            f"mxnet.rnn: mode, state_size and num_layers are required, got mode={mode!r}, "
            f"state_size={state_size!r}, num_layers={num_layers!r}")
    for name, t in (("data", data), ("parameters", parameters), ("state", state)):
        if t is None:
            raise invalid_arguments(f"mxnet.rnn: {name} is required, got None")
    data = _as_tensor(data, "data")
    if len(_dims(data)) != 3:
        raise invalid_arguments(f"mxnet.rnn: data must have 3 dims [T, N, I], got {_dims(data)}")
    T, N, I = _dims(data)
    pk = RnnPacking.make(mode, I, state_size, num_layers, bidirectional, projection_size)
    L, D, H, R = pk.num_layers, pk.directions, pk.state_size, pk.rec_size
    try:
        p = float(p)
    except (TypeError, ValueError):
        raise invalid_arguments(f"mxnet.rnn: p must be a float in [0, 1], got {p!r}") from None
    if not 0.0 <= p <= 1.0:
        raise invalid_arguments(f"mxnet.rnn: p must be in [0, 1], got {p}")
    clip = None
    if lstm_state_clip_min is not None or lstm_state_clip_max is not None:
        if lstm_state_clip_min is None or lstm_state_clip_max is None:
            raise invalid_arguments(
                f"mxnet.rnn: lstm_state_clip_min and lstm_state_clip_max must be given together, "
                f"got min={lstm_state_clip_min!r}, max={lstm_state_clip_max!r}")
        if pk.mode != "lstm":
            raise invalid_arguments(
                f"mxnet.rnn: lstm_state_clip_min/max apply to mode 'lstm' only, "
                f"got mode {pk.mode!r}")
        try:
            clip = (float(lstm_state_clip_min), float(lstm_state_clip_max))
        except (TypeError, ValueError):
            raise invalid_arguments(
                f"mxnet.rnn: lstm_state_clip_min/max must be numbers, got "
                f"{lstm_state_clip_min!r}, {lstm_state_clip_max!r}") from None
        if not clip[0] <= clip[1]:
            raise invalid_arguments(
                f"mxnet.rnn: lstm_state_clip_min must be <= lstm_state_clip_max, got "
                f"{clip[0]} > {clip[1]}")
    # as in MXNet, clip_nan means nothing without a clipping range
    clip_nan = bool(lstm_state_clip_nan) and clip is not None

    # -- tensors ---------------------------------------------------------------------------------
    parameters = _as_tensor(parameters, "parameters")
    size = pk.size()
    pdims = _dims(parameters)
    if len(pdims) != 1 or pdims[0] != size:
        got = f"{pdims[0]}" if len(pdims) == 1 else f"shape {pdims}"
        raise invalid_arguments(
            f"mxnet.rnn: parameters must be a vector of {size} elements (GetRnnParamSize for "
            f"mode={pk.mode!r}, input size {I}, state_size {H}, num_layers {L}, "
            f"bidirectional={D == 2}, projection_size={pk.projection_size}), got {got}")
    if isinstance(parameters, memory) and not parameters.get_desc().is_plain():
        raise invalid_arguments(
            f"mxnet.rnn: parameters must have a plain layout, got {parameters.get_desc()!r}")
    state = _as_tensor(state, "state")
    _check_dims(state, "state", [L * D, N, R], "[num_layers * directions, N, "
                + ("projection_size]" if pk.projection_size else "state_size]"))
    if pk.mode == "lstm":
        if state_cell is None:
            raise invalid_arguments(
                "mxnet.rnn: mode 'lstm' needs state_cell [L * D, N, state_size], got None")
        state_cell = _as_tensor(state_cell, "state_cell")
        _check_dims(state_cell, "state_cell", [L * D, N, H],
                    "[num_layers * directions, N, state_size]")
    elif state_cell is not None:
        raise invalid_arguments(
            f"mxnet.rnn: state_cell is for mode 'lstm' only, got it with mode {pk.mode!r}")

    tensors = {"data": data, "params": parameters, "state": state, "cell": state_cell}
    engines = {n: t.get_engine() for n, t in tensors.items() if isinstance(t, memory)}
    if engine is not None and not isinstance(engine, _engine):
        raise invalid_arguments(
            f"mxnet.rnn: engine must be a pydnnl.engine, got {type(engine).__name__}")
    if stream is not None and not isinstance(stream, _stream):
        raise invalid_arguments(
            f"mxnet.rnn: stream must be a pydnnl.stream, got {type(stream).__name__}")
    wanted = [("engine", engine)] if engine is not None else []
    wanted += [("stream", stream.get_engine())] if stream is not None else []
    wanted += list(engines.items())
    if wanted:
        eng = wanted[0][1]
        for n, e in wanted[1:]:
            if e != eng:
                raise invalid_arguments(
                    f"mxnet.rnn: {n} is on {e!r}, but {wanted[0][0]} is on {eng!r}; every "
                    f"memory, the engine and the stream must be on one device")
    else:
        eng = _get_default_engine()
    if stream is not None and stream.out_of_order:
        raise invalid_arguments("mxnet.rnn: stream must be in-order, got an out-of-order stream")

    # -- features not implemented yet ------------------------------------------------------------
    lengths = None
    if use_sequence_length:
        if sequence_length is None:
            raise invalid_arguments("mxnet.rnn: use_sequence_length=True needs sequence_length")
        # lengths are part of the problem (as in cuDNN's RNN data descriptor): read on the host
        lv = sequence_length.to_numpy() if isinstance(sequence_length, memory) \
            else np.asarray(sequence_length)
        if lv.shape != (N,) or not np.issubdtype(lv.dtype, np.integer):
            raise invalid_arguments(
                f"mxnet.rnn: sequence_length must be {N} integers (one per sequence), got "
                f"shape {list(lv.shape)} of {lv.dtype}")
        if lv.min() < 1 or lv.max() > T:
            raise invalid_arguments(
                f"mxnet.rnn: sequence_length values must be in [1, {T}], "
                f"got {lv.min()}..{lv.max()}")
        lengths = tuple(int(v) for v in lv)

    # -- execute ---------------------------------------------------------------------------------
    bound = {}
    for name, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, memory):
            flat = name == "params"
            t = memory(MemoryDesc(list(t.shape), _F32, _TAG.a if flat else _TAG.abc), eng, t)
        bound[name] = t
    prob = _Problem(eng, pk, T, N, bool(state_outputs), bound["data"].get_desc(),
                    bound["params"].get_desc(), bound["state"].get_desc(),
                    bound["cell"].get_desc() if "cell" in bound else None, clip, clip_nan,
                    lengths, float(p) if training and num_layers > 1 else 0.0)
    plan = _plan_for(prob)
    bound["out"] = memory(plan.out_md, eng)
    if state_outputs:
        bound["hy"] = memory(plan.hy_md, eng)
        if plan.cy_md is not None:
            bound["cy"] = memory(plan.cy_md, eng)
    s = stream if stream is not None else _get_stream(eng)
    plan.execute(s, bound)
    as_numpy = not isinstance(data, memory)
    if as_numpy or stream is None:
        s.wait()
    outs = [bound[k] for k in ("out", "hy", "cy") if k in bound]
    if as_numpy:
        outs = [m.to_numpy() for m in outs]
    return outs if state_outputs else outs[0]


def _get_default_engine() -> _engine:
    if not _default_engine:
        kind = (_engine.kind.cpu if _engine.get_count(_engine.kind.cpu) else _engine.kind.gpu)
        _default_engine.append(_engine(kind, 0))
    return _default_engine[0]


def _get_stream(eng: _engine) -> _stream:
    with _cache_lock:
        s = _streams.get(eng)
        if s is None:
            s = _streams[eng] = _stream(eng)
        return s
