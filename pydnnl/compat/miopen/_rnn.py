"""MIOpen's RNN API (the legacy per-step descriptor functions) on pydnnl's RNN primitives.

Translation only:

* the weight buffer is MIOpen's packing (all matrices by layer, direction, paramID, then all
  biases; each matrix row-major [H, in]); every call translates it on the device with
  reorders from strided views into the primitives' ``ldigo``/``ldgo`` tensors, gates permuted
  (LSTM i, f, o, g -> oneDNN i, f, g, o; GRU z, r, c is oneDNN's LBR-GRU u, r, o), and a 1x1
  convolution sums each pair of input and hidden biases (LBR-GRU keeps the c pair apart);
* per-step descriptors ``xDesc[t] = [batch_t, I]`` with a non-increasing batch are pydnnl's
  packed sequences (``rnn_extensions(seq_lengths=..., packed=True)``): x and y are the
  [sum batch_t, C] rows MIOpen reads, hx/cx/hy/cy [L*D, batch_0, H] are [L, D, N, H];
* skip input, no bias, per-layer bidirectional stacks and dropout between layers are
  ``rnn_extensions`` fields; a stack whose first layer reads another width than D*H runs as
  two primitives (layer 0, then the others; with dropout the first drops its own output);
* the reserve holds the forward primitives' workspaces, a copy of x (BackwardData gets no x;
  the layer-0 weight gradient needs it) and, for two primitives, layer 0's output;
  BackwardData runs the whole pydnnl backward pass and leaves the weight gradients
  in the workspace, where BackwardWeights reads them and writes ``dw`` in MIOpen's packing,
  every element of it (MIOpen overwrites ``dw``).

Departures from MIOpen (see ``docs/compat_miopen_rnn.md``): only ``miopenFloat``; with
``hx`` NULL the hidden-GEMM bias is added at the first step too (MIOpen's legacy kernels skip
it there); dropout masks come from pydnnl's Philox generator (``pydnnl.rnn_extensions``), a new
mask per ForwardTraining call, not from MIOpen's XORWOW states.
"""
from __future__ import annotations

import enum
import weakref
from dataclasses import dataclass

import numpy as np

from ...constants import (
    ARG_BIAS,
    ARG_DIFF_BIAS,
    ARG_DIFF_DST_ITER,
    ARG_DIFF_DST_ITER_C,
    ARG_DIFF_DST_LAYER,
    ARG_DIFF_SRC_ITER,
    ARG_DIFF_SRC_ITER_C,
    ARG_DIFF_SRC_LAYER,
    ARG_DIFF_WEIGHTS_ITER,
    ARG_DIFF_WEIGHTS_LAYER,
    ARG_DST,
    ARG_DST_ITER,
    ARG_DST_ITER_C,
    ARG_DST_LAYER,
    ARG_FROM,
    ARG_SRC,
    ARG_SRC_ITER,
    ARG_SRC_ITER_C,
    ARG_SRC_LAYER,
    ARG_TO,
    ARG_WEIGHTS,
    ARG_WEIGHTS_ITER,
    ARG_WEIGHTS_LAYER,
    ARG_WORKSPACE,
    algorithm,
    prop_kind,
    rnn_direction,
    rnn_flags,
)
from ...error import unimplemented
from ...memory import memory
from ...memory.data_types import data_type
from ...memory.desc import MemoryDesc
from ...primitives import (
    convolution_forward,
    lbr_gru_backward,
    lbr_gru_forward,
    lstm_backward,
    lstm_forward,
    reorder,
    vanilla_rnn_backward,
    vanilla_rnn_forward,
)
from ...primitives.rnn.extensions import rnn_extensions
from ...primitives.sequence import Bind, PrimitiveSequence
from .._gates import gate_runs
from ._common import (
    Handle,
    MIOpenError,
    S,
    TensorDescriptor,
    api,
    bad,
    check_enum,
    check_handle,
    check_int,
    check_memory,
    check_tensor,
    memory_bytes,
    miopenSetTensorDescriptor,
    packed_strides,
    view,
)
from ._enums import (
    miopenDataType_t,
    miopenRNNAlgo_t,
    miopenRNNBiasMode_t,
    miopenRNNDirectionMode_t,
    miopenRNNInputMode_t,
    miopenRNNMode_t,
)

_F32 = data_type.f32
_M = miopenRNNMode_t
_FLOAT = miopenDataType_t.miopenFloat
_ALIGN = 16  # f32 elements (64 bytes) between the regions of workspaces and reserves

#: gates per cell (MIOpen's nHiddenTensorsPerLayer)
_GATES = {_M.miopenRNNRELU: 1, _M.miopenRNNTANH: 1, _M.miopenLSTM: 4, _M.miopenGRU: 3}
#: the MIOpen gate block feeding oneDNN gate j: LSTM i, f, o, g -> i, f, g, o
_ORDER = {_M.miopenRNNRELU: (0,), _M.miopenRNNTANH: (0,), _M.miopenLSTM: (0, 1, 3, 2),
          _M.miopenGRU: (0, 1, 2)}
#: mode -> (forward primitive, backward primitive, activation)
_PRIMS = {_M.miopenRNNRELU: (vanilla_rnn_forward, vanilla_rnn_backward, algorithm.eltwise_relu),
          _M.miopenRNNTANH: (vanilla_rnn_forward, vanilla_rnn_backward, algorithm.eltwise_tanh),
          _M.miopenLSTM: (lstm_forward, lstm_backward, None),
          _M.miopenGRU: (lbr_gru_forward, lbr_gru_backward, None)}
#: bytes miopenDropoutGetStatesSize asks for: the generator is counter based and keeps its
#: state (seed, call counter) in the descriptor, so the buffer is only checked, never read
_STATES_BYTES = 16


class miopenRNGType_t(enum.IntEnum):
    """Dropout generator (MIOpen has one)."""

    MIOPEN_RNG_PSEUDO_XORWOW = 0


MIOPEN_RNG_PSEUDO_XORWOW = miopenRNGType_t.MIOPEN_RNG_PSEUDO_XORWOW


class _NotImplemented(MIOpenError, unimplemented):
    """miopenStatusNotImplemented, also a :class:`pydnnl.unimplemented`."""

    def __init__(self, message: str):
        MIOpenError.__init__(self, S.miopenStatusNotImplemented, message)


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


# -- descriptors ---------------------------------------------------------------------------------
class DropoutDescriptor:
    """``miopenDropoutDescriptor_t``: probability, seed, MIOpen's flags, and ``calls``, the
    ForwardTraining calls that drew masks from it (call k draws Philox counter blocks from
    k * masks-per-call on)."""

    def __init__(self):
        self.dropout, self.states, self.state_bytes, self.seed = 0.0, None, 0, 0
        self.use_mask = self.state_evo = False
        self.rng_mode = MIOPEN_RNG_PSEUDO_XORWOW
        self.calls = 0
        self._destroyed = False

    def __repr__(self) -> str:
        return (f"miopenDropoutDescriptor(dropout={self.dropout}, seed={self.seed}, "
                f"calls={self.calls})")


miopenDropoutDescriptor_t = DropoutDescriptor


class RNNDescriptor:
    """``miopenRNNDescriptor_t``; a new one holds MIOpen's defaults and is unusable until set."""

    def __init__(self):
        self.hsize, self.nlayers = 0, 1
        self.rnn_mode = _M.miopenRNNTANH
        self.algo = miopenRNNAlgo_t.miopenRNNdefault
        self.input_mode = miopenRNNInputMode_t.miopenRNNlinear
        self.dir_mode = miopenRNNDirectionMode_t.miopenRNNunidirection
        self.bias_mode = miopenRNNBiasMode_t.miopenRNNNoBias
        self.data_type = _FLOAT
        self.dropout_desc: DropoutDescriptor | None = None
        self.is_set = False
        self._destroyed = False

    def __repr__(self) -> str:
        if not self.is_set:
            return "miopenRNNDescriptor(unset)"
        return (f"miopenRNNDescriptor({self.rnn_mode.name}, hsize={self.hsize}, "
                f"nlayers={self.nlayers}, {self.input_mode.name}, {self.dir_mode.name}, "
                f"{self.bias_mode.name})")


miopenRNNDescriptor_t = RNNDescriptor


def _check_rnn(where: str, desc) -> RNNDescriptor:
    if not isinstance(desc, RNNDescriptor):
        bad(f"{where}: rnnDesc must be a miopenRNNDescriptor_t, got {desc!r}")
    if desc._destroyed:
        bad(f"{where}: rnnDesc was destroyed")
    if not desc.is_set:
        bad(f"{where}: rnnDesc is not set (call miopenSetRNNDescriptor first)")
    return desc


def _check_dropout(where: str, desc, name: str = "dropoutDesc") -> DropoutDescriptor:
    if not isinstance(desc, DropoutDescriptor):
        bad(f"{where}: {name} must be a miopenDropoutDescriptor_t, got {desc!r}")
    if desc._destroyed:
        bad(f"{where}: {name} was destroyed")
    return desc


@api
def miopenCreateRNNDescriptor() -> RNNDescriptor:
    return RNNDescriptor()


@api
def miopenDestroyRNNDescriptor(rnnDesc: RNNDescriptor) -> None:
    if not isinstance(rnnDesc, RNNDescriptor) or rnnDesc._destroyed:
        bad(f"miopenDestroyRNNDescriptor: rnnDesc must be a live miopenRNNDescriptor_t, got "
            f"{rnnDesc!r}")
    rnnDesc._destroyed = True


def _set_rnn(where: str, d, hsize, nlayers, dropout, inMode, direction, rnnMode, biasMode,
             algo, dataType) -> None:
    if not isinstance(d, RNNDescriptor) or d._destroyed:
        bad(f"{where}: rnnDesc must be a live miopenRNNDescriptor_t, got {d!r}")
    h = check_int(where, "hsize", hsize, 1)
    n = check_int(where, "nlayers", nlayers, 1)
    vals = (check_enum(where, "inMode", miopenRNNInputMode_t, inMode),
            check_enum(where, "direction", miopenRNNDirectionMode_t, direction),
            check_enum(where, "rnnMode", miopenRNNMode_t, rnnMode),
            check_enum(where, "biasMode", miopenRNNBiasMode_t, biasMode),
            check_enum(where, "algo", miopenRNNAlgo_t, algo))
    dt = check_enum(where, "dataType", miopenDataType_t, dataType)
    if dt == miopenDataType_t.miopenHalf:
        raise _NotImplemented(f"{where}: pydnnl's MIOpen RNNs run miopenFloat, got miopenHalf")
    if dt != _FLOAT:
        bad(f"{where}: dataType must be miopenFloat (or miopenHalf), got {dt.name}")
    d.hsize, d.nlayers = h, n
    d.input_mode, d.dir_mode, d.rnn_mode, d.bias_mode, d.algo = vals
    d.data_type, d.dropout_desc, d.is_set = dt, dropout, True


@api
def miopenSetRNNDescriptor(rnnDesc: RNNDescriptor, hsize: int, nlayers: int, inMode, direction,
                           rnnMode, biasMode, algo, dataType) -> None:
    """Hidden size, layers, input mode, direction, cell, bias mode, algorithm (both run the
    same primitives) and data type; no dropout."""
    _set_rnn("miopenSetRNNDescriptor", rnnDesc, hsize, nlayers, None, inMode, direction, rnnMode,
             biasMode, algo, dataType)


@api
def miopenSetRNNDescriptor_V2(rnnDesc: RNNDescriptor, hsize: int, nlayers: int,
                              dropoutDesc: DropoutDescriptor, inMode, direction, rnnMode,
                              biasMode, algo, dataType) -> None:
    """As :func:`miopenSetRNNDescriptor`, with dropout between layers. The descriptor is kept
    by reference, as MIOpen keeps it: later changes to it apply."""
    where = "miopenSetRNNDescriptor_V2"
    dd = _check_dropout(where, dropoutDesc)
    _set_rnn(where, rnnDesc, hsize, nlayers, dd, inMode, direction, rnnMode, biasMode, algo,
             dataType)


@api
def miopenGetRNNDescriptor(rnnDesc: RNNDescriptor) -> tuple:
    """``(rnnMode, algoMode, inputMode, dirMode, biasMode, hiddenSize, layer)``."""
    d = rnnDesc
    if not isinstance(d, RNNDescriptor) or d._destroyed:
        bad(f"miopenGetRNNDescriptor: rnnDesc must be a live miopenRNNDescriptor_t, got {d!r}")
    return d.rnn_mode, d.algo, d.input_mode, d.dir_mode, d.bias_mode, d.hsize, d.nlayers


@api
def miopenGetRNNDescriptor_V2(rnnDesc: RNNDescriptor) -> tuple:
    """``(hiddenSize, layer, dropoutDesc, inputMode, dirMode, rnnMode, biasMode, algoMode,
    dataType)``; dropoutDesc is None when the descriptor was set without one."""
    d = rnnDesc
    if not isinstance(d, RNNDescriptor) or d._destroyed:
        bad(f"miopenGetRNNDescriptor_V2: rnnDesc must be a live miopenRNNDescriptor_t, got {d!r}")
    return (d.hsize, d.nlayers, d.dropout_desc, d.input_mode, d.dir_mode, d.rnn_mode,
            d.bias_mode, d.algo, d.data_type)


# -- dropout descriptors -------------------------------------------------------------------------
@api
def miopenCreateDropoutDescriptor() -> DropoutDescriptor:
    return DropoutDescriptor()


@api
def miopenDestroyDropoutDescriptor(dropoutDesc: DropoutDescriptor) -> None:
    _check_dropout("miopenDestroyDropoutDescriptor", dropoutDesc)._destroyed = True


@api
def miopenDropoutGetStatesSize(handle: Handle) -> int:
    """Bytes of the states buffer :func:`miopenSetDropoutDescriptor` takes."""
    check_handle("miopenDropoutGetStatesSize", handle)
    return _STATES_BYTES


def _set_dropout(where: str, d, handle, dropout, states, stateSizeInBytes, seed, use_mask,
                 state_evo, rng_mode, reset: bool) -> None:
    dd = _check_dropout(where, d)
    h = check_handle(where, handle)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float, np.integer, np.floating)):
        bad(f"{where}: dropout must be a number in [0, 1), got {dropout!r}")
    p = float(np.float32(dropout))
    if not 0.0 <= p < 1.0:
        bad(f"{where}: dropout must be in [0, 1), got {p}")
    nbytes = check_int(where, "stateSizeInBytes", stateSizeInBytes, 0)
    if nbytes < _STATES_BYTES:
        bad(f"{where}: stateSizeInBytes is {nbytes}, miopenDropoutGetStatesSize asks for "
            f"{_STATES_BYTES}")
    check_memory(where, "states", h, states)
    if memory_bytes(states) < nbytes:
        bad(f"{where}: states holds {memory_bytes(states)} bytes, stateSizeInBytes says {nbytes}")
    s = check_int(where, "seed", seed, 0)
    if s >= 2 ** 64:
        bad(f"{where}: seed must fit in 64 bits, got {s}")
    for name, v in (("use_mask", use_mask), ("state_evo", state_evo)):
        if not isinstance(v, (bool, np.bool_)):
            bad(f"{where}: {name} must be a bool, got {v!r}")
    rng = check_enum(where, "rng_mode", miopenRNGType_t, rng_mode)
    dd.dropout, dd.states, dd.state_bytes, dd.seed = p, states, nbytes, s
    dd.use_mask, dd.state_evo, dd.rng_mode = bool(use_mask), bool(state_evo), rng
    if reset:
        dd.calls = 0


@api
def miopenSetDropoutDescriptor(dropoutDesc: DropoutDescriptor, handle: Handle, dropout: float,
                               states: memory, stateSizeInBytes: int, seed: int, use_mask: bool,
                               state_evo: bool, rng_mode) -> None:
    """Probability ``dropout`` in [0, 1) and ``seed``; starts a new mask sequence (call 0)."""
    _set_dropout("miopenSetDropoutDescriptor", dropoutDesc, handle, dropout, states,
                 stateSizeInBytes, seed, use_mask, state_evo, rng_mode, reset=True)


@api
def miopenRestoreDropoutDescriptor(dropoutDesc: DropoutDescriptor, handle: Handle,
                                   dropout: float, states: memory, stateSizeInBytes: int,
                                   seed: int, use_mask: bool, state_evo: bool, rng_mode) -> None:
    """As :func:`miopenSetDropoutDescriptor`, but the mask sequence goes on where it was."""
    _set_dropout("miopenRestoreDropoutDescriptor", dropoutDesc, handle, dropout, states,
                 stateSizeInBytes, seed, use_mask, state_evo, rng_mode, reset=False)


@api
def miopenGetDropoutDescriptor(dropoutDesc: DropoutDescriptor, handle: Handle) -> tuple:
    """``(dropout, states, seed, use_mask, state_evo, rng_mode)``."""
    where = "miopenGetDropoutDescriptor"
    d = _check_dropout(where, dropoutDesc)
    check_handle(where, handle)
    return d.dropout, d.states, d.seed, d.use_mask, d.state_evo, d.rng_mode


# -- MIOpen's weight packing ---------------------------------------------------------------------
@dataclass(frozen=True)
class _Packing:
    """Where each matrix and bias of one RNN configuration sits in MIOpen's weight buffer
    (offsets and sizes in elements). ``layer`` arguments are MIOpen's: physical layer * D +
    direction."""

    mode: miopenRNNMode_t
    H: int
    L: int
    D: int
    I: int
    skip: bool
    bias: bool

    @property
    def G(self) -> int:
        return _GATES[self.mode]

    def width(self, l: int) -> int:
        """Input columns of physical layer l's input matrices (0: skip mode's layer 0)."""
        if l == 0:
            return 0 if self.skip else self.I
        return self.D * self.H

    def layer_elems(self, l: int) -> int:
        return self.D * self.G * self.H * (self.width(l) + self.H)

    def weights_elems(self) -> int:
        return sum(self.layer_elems(l) for l in range(self.L))

    def bias_elems(self) -> int:
        return self.L * 2 * self.G * self.H * self.D if self.bias else 0

    def elems(self) -> int:
        return self.weights_elems() + self.bias_elems()

    def param_offset(self, layer: int, pid: int) -> int:
        l, d = divmod(layer, self.D)
        G, H, w = self.G, self.H, self.width(l)
        off = sum(self.layer_elems(k) for k in range(l))
        if pid < G:   # input matrices: all directions' blocks first
            return off + (d * G + pid) * H * w
        return off + self.D * G * H * w + (d * G + pid - G) * H * H

    def param_dims(self, layer: int, pid: int) -> list[int]:
        return [self.H, self.width(layer // self.D) if pid < self.G else self.H]

    def bias_offset(self, layer: int, bid: int) -> int:
        l, d = divmod(layer, self.D)
        G, H, D = self.G, self.H, self.D
        hidden, k = divmod(bid, G)
        return self.weights_elems() + ((2 * l + hidden) * D + d) * G * H + k * H


def _rows_md(rows: int, cols: int) -> MemoryDesc:
    return MemoryDesc([rows, cols], _F32, "ab")


def _md(dims, strides, offset: int = 0) -> MemoryDesc:
    """An f32 view: element ``offset + sum(i_k * strides[k])`` of a buffer."""
    md = MemoryDesc(list(dims), _F32, [max(int(s), 1) for s in strides])
    md.offset0 = int(offset)
    return md


# -- one problem ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Shape:
    """An RNN descriptor applied to per-step input descriptors."""

    pk: _Packing
    batches: tuple[int, ...]
    p: float
    seed: int

    @property
    def N(self) -> int:
        return self.batches[0]

    @property
    def S(self) -> int:
        return sum(self.batches)

    @property
    def lengths(self) -> tuple[int, ...]:
        """Sequence n runs the steps whose batch exceeds n."""
        return tuple(sum(1 for b in self.batches if b > n) for n in range(self.N))

    @property
    def groups(self) -> list[range]:
        """Layers of each primitive: one stack, unless layer 0 reads another width than the
        layers above (oneDNN stacks need equal widths): then layer 0 alone, then the rest."""
        pk = self.pk
        if pk.L == 1 or pk.I == pk.D * pk.H:
            return [range(pk.L)]
        return [range(0, 1), range(1, pk.L)]

    def slc(self, g: range) -> int:
        return self.pk.I if g.start == 0 else self.pk.D * self.pk.H


def _packing(where: str, r: RNNDescriptor, I: int) -> _Packing:
    skip = r.input_mode == miopenRNNInputMode_t.miopenRNNskip
    if skip and I != r.hsize:
        bad(f"{where}: in miopenRNNskip mode the input size must equal the hidden size "
            f"{r.hsize}, got input size {I}")
    return _Packing(r.rnn_mode, r.hsize, r.nlayers,
                    2 if r.dir_mode == miopenRNNDirectionMode_t.miopenRNNbidirection else 1, I,
                    skip, r.bias_mode == miopenRNNBiasMode_t.miopenRNNwithBias)


def _input_size(where: str, r: RNNDescriptor, xDesc, name: str = "xDesc") -> int:
    x = check_tensor(where, name, xDesc)
    if len(x.dims) < 2:
        bad(f"{where}: {name} must be [batch, input size], got dims {list(x.dims)}")
    if x.data_type != r.data_type:
        bad(f"{where}: {name} is {x.data_type.name}, the RNN descriptor {r.data_type.name}")
    return x.dims[1]


def _steps(where: str, name: str, descs, T: int, width: int | None = None,
           batches: tuple[int, ...] | None = None) -> tuple[tuple[int, ...], int]:
    """(batch of each step, vector width) of a list of per-step descriptors."""
    if not isinstance(descs, (list, tuple)):
        bad(f"{where}: {name} must be a list of sequenceLen tensor descriptors, got {descs!r}")
    if len(descs) < T:
        bad(f"{where}: {name} has {len(descs)} descriptors, sequenceLen is {T}")
    bs, cols = [], set()
    for t in range(T):
        d = check_tensor(where, f"{name}[{t}]", descs[t])
        if len(d.dims) != 2:
            bad(f"{where}: {name}[{t}] must be 2-D [batch, vector], got dims {list(d.dims)}")
        if d.data_type != _FLOAT:
            bad(f"{where}: {name}[{t}] is {d.data_type.name}; the RNN runs miopenFloat")
        if tuple(d.strides) != packed_strides(d.dims):
            bad(f"{where}: {name}[{t}] must be fully packed, got dims {list(d.dims)} strides "
                f"{list(d.strides)}")
        if t and d.dims[0] > bs[-1]:
            bad(f"{where}: {name}[{t}] has batch {d.dims[0]} > {bs[-1]} of step {t - 1}: the "
                f"batch may decrease from step to step, never increase")
        bs.append(d.dims[0])
        cols.add(d.dims[1])
    if len(cols) != 1:
        bad(f"{where}: the descriptors of {name} differ in vector length: {sorted(cols)}")
    c = cols.pop()
    if width is not None and c != width:
        bad(f"{where}: {name} vectors have {c} elements, expected {width}")
    if batches is not None and tuple(bs) != batches:
        bad(f"{where}: {name} batches {bs} differ from xDesc's {list(batches)}")
    return tuple(bs), c


def _shape(where: str, r: RNNDescriptor, seqLen, xDesc, name: str = "xDesc") -> _Shape:
    T = check_int(where, "sequenceLen", seqLen, 1)
    batches, I = _steps(where, name, xDesc, T)
    pk = _packing(where, r, I)
    dd = r.dropout_desc
    if dd is not None and dd._destroyed:
        bad(f"{where}: the RNN descriptor's dropout descriptor was destroyed")
    p = dd.dropout if dd is not None and pk.L > 1 else 0.0
    # both algorithms run the same primitives: the problem does not depend on it
    return _Shape(pk, batches, p, dd.seed if dd is not None and p > 0 else 0)


def _state(where: str, name: str, sh: _Shape, desc, mem, h: Handle):
    """A hidden or cell state argument [L*D, batch_0, H]: (its [L*D, N, H] view desc, memory),
    or None when the memory is NULL."""
    if mem is None:
        return None
    pk = sh.pk
    d = check_tensor(where, name + "Desc", desc)
    want = [pk.L * pk.D, sh.N, pk.H]
    if list(d.dims) != want:
        bad(f"{where}: {name}Desc dims must be [layers * directions, batch of step 0, hidden "
            f"size] = {want}, got {list(d.dims)}")
    if d.data_type != _FLOAT:
        bad(f"{where}: {name}Desc is {d.data_type.name}; the RNN runs miopenFloat")
    check_memory(where, name, h, mem)
    md = _md(d.dims, d.strides)
    view(where, name, h, md, mem)  # size check
    return md


def _group_state(md: MemoryDesc | None, pk: _Packing, g: range) -> MemoryDesc | None:
    """The [Lg, D, N, H] part of a [L*D, N, H] state for the layers of ``g``."""
    if md is None:
        return None
    s0, s1, s2 = md.strides
    return _md([len(g), pk.D, md.dims[1], md.dims[2]], [s0 * pk.D, s0, s1, s2],
               g.start * pk.D * s0)


def _plan(h: Handle, steps) -> PrimitiveSequence:
    """The steps ``(primitive, args)`` as one sequence; args may :class:`Bind` the call's
    buffers by name."""
    plan = PrimitiveSequence(h.engine, "miopen.rnn")
    for prim, args in steps:
        plan.add(prim, args)
    return plan


def _run(h: Handle, plan: PrimitiveSequence, bound: dict) -> None:
    plan.run(h.stream, bound)


def _reorder(h: Handle, smd: MemoryDesc, dmd: MemoryDesc):
    return h.cached(("rnn_reorder", smd, dmd), lambda: reorder(
        reorder.primitive_desc(h.engine, smd, h.engine, dmd)))


def _spans(pk: _Packing, layers) -> list[range]:
    """Runs of layers whose matrices are equally far apart (layer 0 may differ in width)."""
    layers = list(layers)
    if len(layers) > 1 and layers[0] == 0 and pk.width(0) != pk.width(1):
        return [range(0, 1), range(1, layers[-1] + 1)]
    return [range(layers[0], layers[-1] + 1)] if layers else []


class _RnnLayers:
    """One problem in pydnnl's terms: the primitives of each group of layers, the handle's
    temporaries between them, and the regions of MIOpen's workspace and reserve."""

    def __init__(self, h: Handle, sh: _Shape):
        self.h, self.sh, self.pk = h, sh, sh.pk
        pk = self.pk
        self.groups = sh.groups
        self.lstm, self.gru = pk.mode == _M.miopenLSTM, pk.mode == _M.miopenGRU
        self.direction = (rnn_direction.bidirectional_concat if pk.D == 2
                          else rnn_direction.unidirectional_left2right)
        # per group: (inference extensions, training extensions)
        self.ext = []
        for gi, g in enumerate(self.groups):
            kw = dict(layer_bidirectional=pk.D == 2, seq_lengths=sh.lengths, packed=True,
                      skip_input=pk.skip and g.start == 0, no_bias=not pk.bias)
            train = kw
            if sh.p > 0:
                # each primitive draws from its own Philox key; the first of two also drops
                # its own output, which the second reads
                train = dict(kw, dropout=sh.p, dropout_seed=(sh.seed + gi) % 2 ** 64,
                             dropout_output=gi < len(self.groups) - 1)
            self.ext.append((rnn_extensions(**kw), rnn_extensions(**train)))
        # each group's weights in the primitives' layouts (handle temporaries, filled per call)
        Gb = 4 if self.gru else pk.G
        self.w_md = []
        for g in self.groups:
            Lg, D, G, H = len(g), pk.D, pk.G, pk.H
            mds = {"wi": MemoryDesc([Lg, D, H, G, H], _F32, "ldigo")}
            if not (pk.skip and g.start == 0 and Lg == 1):
                mds["wl"] = MemoryDesc([Lg, D, sh.slc(g), G, H], _F32, "ldigo")
            if pk.bias:
                mds["b"] = MemoryDesc([Lg, D, Gb, H], _F32, "ldgo")
            self.w_md.append(mds)
        self.rows = _rows_md(sh.S, pk.D * pk.H)   # y, dy and layer 0's output
        self.x_md = _rows_md(sh.S, pk.I)
        # workspace: each group's weight gradients, from BackwardData to BackwardWeights
        self.grad_md, off = [], 0
        for mds in self.w_md:
            out = {}
            for k, md in mds.items():
                out[k] = _md(md.dims, packed_strides(md.dims), off)
                off = _align(off + md.nelems())
            self.grad_md.append(out)
        self.workspace_bytes = off * 4
        self._pds: dict = {}
        self._prims: dict = {}
        self._steps: dict = {}
        self._reserve = None

    def wmem(self, gi: int, kind: str) -> memory:
        md = self.w_md[gi][kind]
        return self.h.temp(("rnn_" + kind, gi, md), md)

    # -- sizes ----------------------------------------------------------------------------------
    def reserve(self) -> tuple[int, dict]:
        """(bytes, {region: offset in elements}). Group 0's forward workspace sits at offset 0
        (bound directly); then a copy of x, which BackwardData does not get but the layer-0
        weight gradient needs; with two groups the second one's workspace and layer 0's
        output follow."""
        if self._reserve is None:
            ws = [self.fwd_pd(gi, True, {}).workspace_desc().get_size()
                  for gi in range(len(self.groups))]
            regions, off = {"x": _align(ws[0] // 4)}, _align(ws[0] // 4) + self.x_md.nelems()
            if len(self.groups) > 1:
                regions["ws1"] = _align(off)
                regions["y0"] = _align(regions["ws1"] + ws[1] // 4)
                off = regions["y0"] + self.rows.nelems()
            self._reserve = (off * 4, regions)
        return self._reserve

    # -- primitive descriptors ------------------------------------------------------------------
    def _descs(self, gi: int, st: dict) -> dict:
        pk, sh, g = self.pk, self.sh, self.groups[gi]
        w = self.w_md[gi]
        d = dict(src_layer_desc=_rows_md(sh.S, sh.slc(g)),
                 src_iter_desc=_group_state(st.get("hx"), pk, g),
                 weights_layer_desc=w.get("wl"), weights_iter_desc=w["wi"],
                 bias_desc=w.get("b"),
                 dst_layer_desc=self.rows, dst_iter_desc=_group_state(st.get("hy"), pk, g))
        if self.lstm:
            d["src_iter_c_desc"] = _group_state(st.get("cx"), pk, g)
            d["dst_iter_c_desc"] = _group_state(st.get("cy"), pk, g)
        return d

    def _head(self, prop, backward: bool = False):
        fwd, bwd, act = _PRIMS[self.pk.mode]
        head = (self.h.engine, prop) + ((act,) if act is not None else ()) + (self.direction,)
        return (bwd if backward else fwd), head

    def fwd_pd(self, gi: int, training: bool, st: dict):
        key = ("fwd", gi, training, tuple(st.get(k) for k in ("hx", "cx", "hy", "cy")))
        if key not in self._pds:
            cls, head = self._head(prop_kind.forward_training if training
                                   else prop_kind.forward_inference)
            pd = cls.primitive_desc(*head, **self._descs(gi, st),
                                    extensions=self.ext[gi][1 if training else 0])
            self._pds[key] = (pd, cls)
        return self._pds[key][0]

    def bwd_pd(self, gi: int, st: dict):
        key = ("bwd", gi, tuple(st.get(k) for k in ("hx", "cx", "dhy", "dcy", "dhx", "dcx")))
        if key not in self._pds:
            # the workspace does not depend on hy and cy: the hint needs neither
            fst = {k: st.get(k) for k in ("hx", "cx")}
            fpd = self.fwd_pd(gi, True, fst)
            pk, sh, g = self.pk, self.sh, self.groups[gi]
            gm = self.grad_md[gi]
            diffs = dict(diff_src_layer_desc=_rows_md(sh.S, sh.slc(g)),
                         diff_src_iter_desc=_group_state(st.get("dhx"), pk, g),
                         diff_weights_layer_desc=gm.get("wl"), diff_weights_iter_desc=gm["wi"],
                         diff_bias_desc=gm.get("b"), diff_dst_layer_desc=self.rows,
                         diff_dst_iter_desc=_group_state(st.get("dhy"), pk, g))
            if self.lstm:
                diffs["diff_src_iter_c_desc"] = _group_state(st.get("dcx"), pk, g)
                diffs["diff_dst_iter_c_desc"] = _group_state(st.get("dcy"), pk, g)
            cls, head = self._head(prop_kind.backward, backward=True)
            pd = cls.primitive_desc(*head, **self._descs(gi, fst), **diffs, hint_fwd_pd=fpd,
                                    flags=rnn_flags.diff_weights_overwrite)
            self._pds[key] = (pd, cls)
        return self._pds[key][0]

    def _prim(self, pd):
        k = id(pd)
        if k not in self._prims:
            cls = next(c for p, c in self._pds.values() if p is pd)
            self._prims[k] = cls(pd)
        return self._prims[k]

    # -- MIOpen views of each group's tensors ---------------------------------------------------
    def matrix_pairs(self, gi: int, tensors: dict) -> list:
        """(kind, MIOpen view, view of the group's tensor) of every run of gates of the weight
        matrices; ``tensors`` maps "wl"/"wi" to the group's descs (weights or gradients)."""
        pk, g = self.pk, self.groups[gi]
        G, H, D = pk.G, pk.H, pk.D
        order = _ORDER[pk.mode]
        out = []
        for kind, first in (("wl", 0), ("wi", G)):
            tmd = tensors.get(kind)
            if tmd is None:
                continue
            # skip mode: layer 0 has no input matrices (the primitive does not read its part)
            layers = [l for l in g if not (kind == "wl" and pk.skip and l == 0)]
            for span in _spans(pk, layers):
                k = pk.width(span.start) if kind == "wl" else H
                for j0, n in gate_runs(order):
                    dims = [len(span), D, k, n, H]
                    # MIOpen: [H rows, k cols] per gate, so (i, o) is at o * k + i
                    mio = _md(dims, [pk.layer_elems(span.start), G * H * k, 1, H * k, k],
                              pk.param_offset(span.start * D, first + order[j0]))
                    out.append((kind, mio, tmd.submemory_desc(dims, [span.start - g.start, 0, 0,
                                                                     j0, 0])))
        return out

    def _bias_mio(self, g: range, bid: int, n: int) -> MemoryDesc:
        pk = self.pk
        return _md([len(g), pk.D, n, pk.H], [2 * pk.D * pk.G * pk.H, pk.G * pk.H, pk.H, 1],
                   pk.bias_offset(g.start * pk.D, bid))

    def _summed_runs(self) -> list:
        """Runs of the oneDNN gates whose bias is a sum of MIOpen's two (LBR-GRU: u, r)."""
        order = _ORDER[self.pk.mode]
        return gate_runs(order[:2] if self.gru else order)

    # -- plans ----------------------------------------------------------------------------------
    def weight_steps(self) -> list:
        """MIOpen buffer ``w`` -> each group's weights: reorders of strided views, and one 1x1
        convolution adding each input-GEMM bias to its hidden-GEMM bias."""
        if "weights" in self._steps:
            return self._steps["weights"]
        h, pk = self.h, self.pk
        G, H, D = pk.G, pk.H, pk.D
        eng = h.engine
        steps = []
        if pk.bias:
            # batch = layers, channels = (input, hidden), spatial = (direction, summed gates)
            W = 2 * H if self.gru else G * H
            src = _md([pk.L, 2, D, W], [2 * D * G * H, D * G * H, G * H, 1], pk.weights_elems())
            ones = MemoryDesc([1, 2, 1, 1], _F32, "oihw")
            dst = MemoryDesc([pk.L, 1, D, W], _F32, "nchw")

            def make():
                pd = convolution_forward.primitive_desc(
                    eng, prop_kind.forward_inference, algorithm.convolution_direct, src, ones,
                    None, dst, [1, 1], [0, 0], [0, 0])
                return convolution_forward(pd)

            sums = h.temp(("rnn_bias_sums", dst), dst)
            steps.append((h.cached(("rnn_bias_sum", src, dst), make),
                          {ARG_SRC: Bind("w", src), ARG_DST: sums,
                           ARG_WEIGHTS: h.temp(("rnn_ones", ones), ones,
                                               np.ones((1, 2, 1, 1), np.float32))}))
        order = _ORDER[pk.mode]
        for gi, g in enumerate(self.groups):
            for kind, mio, part in self.matrix_pairs(gi, self.w_md[gi]):
                dst = memory(part, eng, self.wmem(gi, kind).buffer)
                steps.append((_reorder(h, mio, part), {ARG_FROM: Bind("w", mio), ARG_TO: dst}))
            if not pk.bias:
                continue
            bmd, Lg, bmem = self.w_md[gi]["b"], len(g), self.wmem(gi, "b")
            W = 2 * H if self.gru else G * H
            for j0, n in self._summed_runs():
                src = _md([Lg, D, n, H], [D * W, W, H, 1], g.start * D * W + order[j0] * H)
                part = bmd.submemory_desc([Lg, D, n, H], [0, 0, j0, 0])
                steps.append((_reorder(h, src, part), {ARG_FROM: memory(src, eng, sums.buffer),
                                                       ARG_TO: memory(part, eng, bmem.buffer)}))
            if self.gru:
                # LBR-GRU's o bias is c's input bias, its u' bias c's hidden bias
                for j, bid in ((2, 2), (3, G + 2)):
                    src = self._bias_mio(g, bid, 1)
                    part = bmd.submemory_desc([Lg, D, 1, H], [0, 0, j, 0])
                    steps.append((_reorder(h, src, part), {
                        ARG_FROM: Bind("w", src), ARG_TO: memory(part, eng, bmem.buffer)}))
        self._steps["weights"] = steps
        return steps

    def _copy(self, src, src_off: int, dst, dst_off: int, n: int):
        """A step copying n f32 elements between buffers (memories or bound names)."""
        # [1, n]: pydnnl's reorder fails on 1-D tensors of some lengths
        smd, dmd = _md([1, n], [n, 1], src_off), _md([1, n], [n, 1], dst_off)
        def bind(m, md):
            return Bind(m, md) if isinstance(m, str) else memory(md, self.h.engine, m.buffer)

        return (_reorder(self.h, smd, dmd), {ARG_FROM: bind(src, smd), ARG_TO: bind(dst, dmd)})

    def _temps(self, gi: int):
        """(group gi's forward workspace when it is not in the reserve, layer 0's output)."""
        h = self.h
        ws = None
        if gi > 0:
            md = self.fwd_pd(gi, True, {}).workspace_desc()
            ws = h.temp(("rnn_ws", gi, md), md)
        return ws, h.temp(("rnn_y0", self.rows), self.rows)

    def forward_steps(self, training: bool, st: dict) -> tuple[PrimitiveSequence, list]:
        key = ("fwd", training, tuple(st.get(k) for k in ("hx", "cx", "hy", "cy")))
        if key in self._steps:
            return self._steps[key]
        pds = [self.fwd_pd(gi, training, st) for gi in range(len(self.groups))]
        steps, prims = list(self.weight_steps()), []
        last = len(self.groups) - 1
        for gi, pd in enumerate(pds):
            prim = self._prim(pd)
            d = self._descs(gi, st)
            ws, y0 = self._temps(gi)
            args = {ARG_SRC_LAYER: Bind("x", d["src_layer_desc"]) if gi == 0 else y0,
                    ARG_DST_LAYER: Bind("y", self.rows) if gi == last else y0,
                    **self._weight_args(gi)}
            for arg, name, dname in ((ARG_SRC_ITER, "hx", "src_iter_desc"),
                                     (ARG_SRC_ITER_C, "cx", "src_iter_c_desc"),
                                     (ARG_DST_ITER, "hy", "dst_iter_desc"),
                                     (ARG_DST_ITER_C, "cy", "dst_iter_c_desc")):
                if d.get(dname) is not None:
                    args[arg] = Bind(name, d[dname])
            if training:
                args[ARG_WORKSPACE] = (Bind("reserve", pd.workspace_desc()) if gi == 0 else ws)
            steps.append((prim, args))
            prims.append(prim)
        if training:
            reg = self.reserve()[1]
            steps.append(self._copy("x", 0, "reserve", reg["x"], self.x_md.nelems()))
            if last:
                ws, y0 = self._temps(1)
                n = ws.get_desc().get_size() // 4
                steps.append(self._copy(ws, 0, "reserve", reg["ws1"], n))
                steps.append(self._copy(y0, 0, "reserve", reg["y0"], self.rows.nelems()))
        self._steps[key] = (_plan(self.h, steps), prims)
        return self._steps[key]

    def _weight_args(self, gi: int) -> dict:
        w = self.w_md[gi]
        a = {ARG_WEIGHTS_ITER: self.wmem(gi, "wi")}
        if "wl" in w:
            a[ARG_WEIGHTS_LAYER] = self.wmem(gi, "wl")
        if "b" in w:
            a[ARG_BIAS] = self.wmem(gi, "b")
        return a

    def backward_steps(self, st: dict) -> PrimitiveSequence:
        key = ("bwd", tuple(st.get(k) for k in ("hx", "cx", "dhy", "dcy", "dhx", "dcx")))
        if key in self._steps:
            return self._steps[key]
        pds = [self.bwd_pd(gi, st) for gi in range(len(self.groups))]
        steps = list(self.weight_steps())
        last = len(self.groups) - 1
        reg = self.reserve()[1]
        x0 = self.h.temp(("rnn_x", self.x_md), self.x_md)
        steps.append(self._copy("reserve", reg["x"], x0, 0, self.x_md.nelems()))
        if last:
            ws, y0 = self._temps(1)
            n = ws.get_desc().get_size() // 4
            steps.append(self._copy("reserve", reg["ws1"], ws, 0, n))
            steps.append(self._copy("reserve", reg["y0"], y0, 0, self.rows.nelems()))
        dy0 = self.h.temp(("rnn_dy0", self.rows), self.rows)
        for gi in reversed(range(len(self.groups))):
            pd = pds[gi]
            ws, y0 = self._temps(gi)
            d = self._descs(gi, {k: st.get(k) for k in ("hx", "cx")})
            gm = self.grad_md[gi]
            args = {ARG_SRC_LAYER: x0 if gi == 0 else y0,
                    ARG_DST_LAYER: Bind("y", self.rows) if gi == last else y0,
                    ARG_WORKSPACE: Bind("reserve", pd.workspace_desc()) if gi == 0 else ws,
                    ARG_DIFF_SRC_LAYER: Bind("dx", d["src_layer_desc"]) if gi == 0 else dy0,
                    ARG_DIFF_DST_LAYER: Bind("dy", self.rows) if gi == last else dy0,
                    ARG_DIFF_WEIGHTS_ITER: Bind("workspace", gm["wi"]),
                    **self._weight_args(gi)}
            if "wl" in gm:
                args[ARG_DIFF_WEIGHTS_LAYER] = Bind("workspace", gm["wl"])
            if "b" in gm:
                args[ARG_DIFF_BIAS] = Bind("workspace", gm["b"])
            g = self.groups[gi]
            for arg, name in ((ARG_SRC_ITER, "hx"), (ARG_SRC_ITER_C, "cx"),
                              (ARG_DIFF_DST_ITER, "dhy"), (ARG_DIFF_DST_ITER_C, "dcy"),
                              (ARG_DIFF_SRC_ITER, "dhx"), (ARG_DIFF_SRC_ITER_C, "dcx")):
                md = _group_state(st.get(name), self.pk, g)
                if md is not None:
                    args[arg] = Bind(name, md)
            steps.append((self._prim(pd), args))
        self._steps[key] = _plan(self.h, steps)
        return self._steps[key]

    def gradient_steps(self) -> PrimitiveSequence:
        """The workspace's weight gradients -> ``dw`` in MIOpen's packing, every element: each
        summed bias's gradient goes to both biases of its pair."""
        if "grads" in self._steps:
            return self._steps["grads"]
        h, pk = self.h, self.pk
        G, H, D = pk.G, pk.H, pk.D
        order = _ORDER[pk.mode]
        steps = []
        for gi, g in enumerate(self.groups):
            gm = self.grad_md[gi]
            for _, mio, part in self.matrix_pairs(gi, gm):
                steps.append((_reorder(h, part, mio), {ARG_FROM: Bind("workspace", part),
                                                       ARG_TO: Bind("dw", mio)}))
            if "b" not in gm:
                continue
            Lg = len(g)
            pairs = [(j0, n, [order[j0], G + order[j0]]) for j0, n in self._summed_runs()]
            if self.gru:
                pairs += [(2, 1, [2]), (3, 1, [G + 2])]
            for j0, n, bids in pairs:
                part = gm["b"].submemory_desc([Lg, D, n, H], [0, 0, j0, 0])
                for bid in bids:
                    mio = self._bias_mio(g, bid, n)
                    steps.append((_reorder(h, part, mio), {ARG_FROM: Bind("workspace", part),
                                                           ARG_TO: Bind("dw", mio)}))
        self._steps["grads"] = _plan(self.h, steps)
        return self._steps["grads"]


def _net(h: Handle, sh: _Shape) -> _RnnLayers:
    return h.cached(("rnn_net", sh), lambda: _RnnLayers(h, sh))


# -- sizes and descriptors -----------------------------------------------------------------------
@api
def miopenGetRNNWorkspaceSize(handle: Handle, rnnDesc: RNNDescriptor, sequenceLen: int,
                              xDesc: list) -> int:
    """Bytes of the workspace of every RNN call of this problem: it carries the weight
    gradients from BackwardData to BackwardWeights."""
    where = "miopenGetRNNWorkspaceSize"
    h, r = check_handle(where, handle), _check_rnn(where, rnnDesc)
    return _net(h, _shape(where, r, sequenceLen, xDesc)).workspace_bytes


@api
def miopenGetRNNTrainingReserveSize(handle: Handle, rnnDesc: RNNDescriptor, sequenceLen: int,
                                    xDesc: list) -> int:
    """Bytes of the reserve ForwardTraining fills and the backward calls read: the forward
    primitives' workspaces (and layer 0's output when layer 0 runs alone)."""
    where = "miopenGetRNNTrainingReserveSize"
    h, r = check_handle(where, handle), _check_rnn(where, rnnDesc)
    return _net(h, _shape(where, r, sequenceLen, xDesc)).reserve()[0]


def _dtype(where: str, r: RNNDescriptor, dtype) -> None:
    dt = check_enum(where, "dtype", miopenDataType_t, dtype)
    if dt != r.data_type:
        bad(f"{where}: dtype {dt.name} differs from the RNN descriptor's {r.data_type.name}")


@api
def miopenGetRNNParamsSize(handle: Handle, rnnDesc: RNNDescriptor, xDesc: TensorDescriptor,
                           dtype) -> int:
    """Bytes of the weight buffer: G H D (I + H + (L - 1)(D + 1) H) matrix elements (I = 0 in
    skip mode), then 2 L D G H biases (none with miopenRNNNoBias)."""
    where = "miopenGetRNNParamsSize"
    check_handle(where, handle)
    r = _check_rnn(where, rnnDesc)
    I = _input_size(where, r, xDesc)
    _dtype(where, r, dtype)
    return _packing(where, r, I).elems() * 4


@api
def miopenGetRNNParamsDescriptor(handle: Handle, rnnDesc: RNNDescriptor,
                                 xDesc: TensorDescriptor, wDesc: TensorDescriptor,
                                 dtype) -> None:
    """Sets ``wDesc`` to MIOpen's 2-D view of the weight buffer: D G H columns, one row per
    input (and hidden) column of the matrices and two per layer of biases."""
    where = "miopenGetRNNParamsDescriptor"
    check_handle(where, handle)
    r = _check_rnn(where, rnnDesc)
    pk = _packing(where, r, _input_size(where, r, xDesc))
    _dtype(where, r, dtype)
    if not isinstance(wDesc, TensorDescriptor) or wDesc._destroyed:
        bad(f"{where}: wDesc must be a live miopenTensorDescriptor_t, got {wDesc!r}")
    rows = pk.width(0) + ((pk.L - 1) * (pk.D + 1) + 1) * pk.H + (2 * pk.L if pk.bias else 0)
    miopenSetTensorDescriptor(wDesc, r.data_type, 2, [rows, pk.D * pk.G * pk.H])


@api
def miopenGetRNNInputTensorSize(handle: Handle, rnnDesc: RNNDescriptor, seqLen: int,
                                xDesc: list) -> int:
    """Bytes of the packed input: sum of the step batches x input size."""
    where = "miopenGetRNNInputTensorSize"
    check_handle(where, handle)
    _check_rnn(where, rnnDesc)
    batches, I = _steps(where, "xDesc", xDesc, check_int(where, "seqLen", seqLen, 1))
    return sum(batches) * I * 4


@api
def miopenGetRNNHiddenTensorSize(handle: Handle, rnnDesc: RNNDescriptor, seqLen: int,
                                 xDesc: list) -> int:
    """Bytes of a hidden state: layers x directions x batch of step 0 x hidden size."""
    where = "miopenGetRNNHiddenTensorSize"
    check_handle(where, handle)
    r = _check_rnn(where, rnnDesc)
    batches, _ = _steps(where, "xDesc", xDesc, check_int(where, "seqLen", seqLen, 1))
    D = 2 if r.dir_mode == miopenRNNDirectionMode_t.miopenRNNbidirection else 1
    return batches[0] * r.hsize * r.nlayers * D * 4


# -- layer parameters ----------------------------------------------------------------------------
def _ids(where: str, pk: _Packing, layer, pid, name: str) -> tuple[int, int]:
    layer = check_int(where, "layer", layer, 0)
    if layer >= pk.L * pk.D:
        bad(f"{where}: layer must be in [0, {pk.L * pk.D}) (layers x directions), got {layer}")
    pid = check_int(where, name, pid, 0)
    if pid >= 2 * pk.G:
        bad(f"{where}: {name} must be in [0, {2 * pk.G}) for {pk.mode.name}, got {pid}")
    return layer, pid


def _no_skip_input(where: str, pk: _Packing, layer: int, pid: int, name: str) -> None:
    if pk.skip and layer < pk.D and pid < pk.G:
        bad(f"{where}: in miopenRNNskip mode layer {layer} has no input matrices ({name} "
            f"{pid} < {pk.G}); its hidden matrices are {name} {pk.G} to {2 * pk.G - 1}")


def _with_bias(where: str, pk: _Packing) -> None:
    if not pk.bias:
        bad(f"{where}: the RNN descriptor has miopenRNNNoBias: there are no biases")


def _out_desc(where: str, name: str, desc) -> TensorDescriptor:
    if not isinstance(desc, TensorDescriptor) or desc._destroyed:
        bad(f"{where}: {name} must be a live miopenTensorDescriptor_t, got {desc!r}")
    return desc


def _weights(where: str, h: Handle, pk: _Packing, wDesc, w, name: str = "w") -> None:
    """Check a weight buffer argument (descriptor and memory of miopenGetRNNParamsSize bytes)."""
    d = check_tensor(where, name + "Desc", wDesc)
    if d.data_type != _FLOAT:
        bad(f"{where}: {name}Desc is {d.data_type.name}; the RNN runs miopenFloat")
    check_memory(where, name, h, w)
    if memory_bytes(w) < pk.elems() * 4:
        bad(f"{where}: {name} holds {memory_bytes(w)} bytes, miopenGetRNNParamsSize is "
            f"{pk.elems() * 4}")


def _copy_block(h: Handle, src_md: MemoryDesc, src: memory, dst_md: MemoryDesc,
                dst: memory) -> None:
    _reorder(h, src_md, dst_md).execute(h.stream, {ARG_FROM: memory(src_md, h.engine, src.buffer),
                                                    ARG_TO: memory(dst_md, h.engine, dst.buffer)})


@api
def miopenGetRNNLayerParamSize(handle: Handle, rnnDesc: RNNDescriptor, layer: int,
                               xDesc: TensorDescriptor, paramID: int) -> int:
    """Bytes of one matrix (0 for skip mode's absent layer-0 input matrices, as in MIOpen)."""
    where = "miopenGetRNNLayerParamSize"
    check_handle(where, handle)
    r = _check_rnn(where, rnnDesc)
    pk = _packing(where, r, _input_size(where, r, xDesc))
    layer, pid = _ids(where, pk, layer, paramID, "paramID")
    rows, cols = pk.param_dims(layer, pid)
    return rows * cols * 4


@api
def miopenGetRNNLayerBiasSize(handle: Handle, rnnDesc: RNNDescriptor, layer: int,
                              biasID: int) -> int:
    """Bytes of one bias: hidden size x 4."""
    where = "miopenGetRNNLayerBiasSize"
    check_handle(where, handle)
    r = _check_rnn(where, rnnDesc)
    # the input size does not matter to a bias
    _ids(where, _Packing(r.rnn_mode, r.hsize, r.nlayers, 2 if r.dir_mode else 1, 1, False, True),
         layer, biasID, "biasID")
    return r.hsize * 4


@api
def miopenGetRNNLayerParamOffset(rnnDesc: RNNDescriptor, layer: int, xDesc: TensorDescriptor,
                                 paramID: int, paramDesc: TensorDescriptor) -> int:
    """Sets ``paramDesc`` to the packed [H, in] matrix; returns its offset in elements."""
    where = "miopenGetRNNLayerParamOffset"
    r = _check_rnn(where, rnnDesc)
    pk = _packing(where, r, _input_size(where, r, xDesc))
    layer, pid = _ids(where, pk, layer, paramID, "paramID")
    _no_skip_input(where, pk, layer, pid, "paramID")
    miopenSetTensorDescriptor(_out_desc(where, "paramDesc", paramDesc), _FLOAT, 2,
                              pk.param_dims(layer, pid))
    return pk.param_offset(layer, pid)


@api
def miopenGetRNNLayerBiasOffset(rnnDesc: RNNDescriptor, layer: int, xDesc: TensorDescriptor,
                                biasID: int, biasDesc: TensorDescriptor) -> int:
    """Sets ``biasDesc`` to [H]; returns the bias's offset in elements."""
    where = "miopenGetRNNLayerBiasOffset"
    r = _check_rnn(where, rnnDesc)
    pk = _packing(where, r, _input_size(where, r, xDesc))
    layer, bid = _ids(where, pk, layer, biasID, "biasID")
    _with_bias(where, pk)
    miopenSetTensorDescriptor(_out_desc(where, "biasDesc", biasDesc), _FLOAT, 1, [pk.H])
    return pk.bias_offset(layer, bid)


def _layer_block(where: str, handle, rnnDesc, layer, xDesc, wDesc, w, ident, name: str):
    h = check_handle(where, handle)
    r = _check_rnn(where, rnnDesc)
    pk = _packing(where, r, _input_size(where, r, xDesc))
    layer, ident = _ids(where, pk, layer, ident, name)
    _weights(where, h, pk, wDesc, w)
    return h, pk, layer, ident


@api
def miopenGetRNNLayerParam(handle: Handle, rnnDesc: RNNDescriptor, layer: int,
                           xDesc: TensorDescriptor, wDesc: TensorDescriptor, w: memory,
                           paramID: int, paramDesc: TensorDescriptor,
                           layerParam: memory | None) -> None:
    """Sets ``paramDesc`` to the packed [H, in] matrix and copies it into ``layerParam``
    (unless None)."""
    where = "miopenGetRNNLayerParam"
    h, pk, layer, pid = _layer_block(where, handle, rnnDesc, layer, xDesc, wDesc, w, paramID,
                                     "paramID")
    _no_skip_input(where, pk, layer, pid, "paramID")
    pd = _out_desc(where, "paramDesc", paramDesc)
    dims = pk.param_dims(layer, pid)
    dst = _md(dims, packed_strides(dims))
    if layerParam is not None:
        check_memory(where, "layerParam", h, layerParam)
        view(where, "layerParam", h, dst, layerParam)
    miopenSetTensorDescriptor(pd, _FLOAT, 2, dims)
    if layerParam is not None:
        _copy_block(h, _md(dims, [dims[1], 1], pk.param_offset(layer, pid)), w, dst, layerParam)


@api
def miopenGetRNNLayerBias(handle: Handle, rnnDesc: RNNDescriptor, layer: int,
                          xDesc: TensorDescriptor, wDesc: TensorDescriptor, w: memory,
                          biasID: int, biasDesc: TensorDescriptor,
                          layerBias: memory | None) -> None:
    """Sets ``biasDesc`` to [H] and copies the bias into ``layerBias`` (unless None)."""
    where = "miopenGetRNNLayerBias"
    h, pk, layer, bid = _layer_block(where, handle, rnnDesc, layer, xDesc, wDesc, w, biasID,
                                     "biasID")
    _with_bias(where, pk)
    bd = _out_desc(where, "biasDesc", biasDesc)
    dst = _md([1, pk.H], [pk.H, 1])   # 2-D: see _RnnLayers._copy
    if layerBias is not None:
        check_memory(where, "layerBias", h, layerBias)
        view(where, "layerBias", h, dst, layerBias)
    miopenSetTensorDescriptor(bd, _FLOAT, 1, [pk.H])
    if layerBias is not None:
        _copy_block(h, _md([1, pk.H], [pk.H, 1], pk.bias_offset(layer, bid)), w, dst, layerBias)


@api
def miopenSetRNNLayerParam(handle: Handle, rnnDesc: RNNDescriptor, layer: int,
                           xDesc: TensorDescriptor, wDesc: TensorDescriptor, w: memory,
                           paramID: int, paramDesc: TensorDescriptor, layerParam: memory) -> None:
    """Copies ``layerParam`` (read through ``paramDesc``, [H, in]) into the weight buffer."""
    where = "miopenSetRNNLayerParam"
    h, pk, layer, pid = _layer_block(where, handle, rnnDesc, layer, xDesc, wDesc, w, paramID,
                                     "paramID")
    _no_skip_input(where, pk, layer, pid, "paramID")
    pd = check_tensor(where, "paramDesc", paramDesc)
    dims = pk.param_dims(layer, pid)
    if list(pd.dims) != dims or pd.data_type != _FLOAT:
        bad(f"{where}: paramDesc must be miopenFloat {dims} (miopenGetRNNLayerParam gives it), "
            f"got {pd.data_type.name} {list(pd.dims)}")
    check_memory(where, "layerParam", h, layerParam)
    src = _md(dims, pd.strides)
    view(where, "layerParam", h, src, layerParam)
    _copy_block(h, src, layerParam, _md(dims, [dims[1], 1], pk.param_offset(layer, pid)), w)


@api
def miopenSetRNNLayerBias(handle: Handle, rnnDesc: RNNDescriptor, layer: int,
                          xDesc: TensorDescriptor, wDesc: TensorDescriptor, w: memory,
                          biasID: int, biasDesc: TensorDescriptor, layerBias: memory) -> None:
    """Copies ``layerBias`` (read through ``biasDesc``, [H]) into the weight buffer."""
    where = "miopenSetRNNLayerBias"
    h, pk, layer, bid = _layer_block(where, handle, rnnDesc, layer, xDesc, wDesc, w, biasID,
                                     "biasID")
    _with_bias(where, pk)
    bd = check_tensor(where, "biasDesc", biasDesc)
    if list(bd.dims) != [pk.H] or bd.data_type != _FLOAT:
        bad(f"{where}: biasDesc must be miopenFloat [{pk.H}] (miopenGetRNNLayerBias gives it), "
            f"got {bd.data_type.name} {list(bd.dims)}")
    check_memory(where, "layerBias", h, layerBias)
    src = _md([1, pk.H], [pk.H * bd.strides[0], bd.strides[0]])   # 2-D: see _RnnLayers._copy
    view(where, "layerBias", h, src, layerBias)
    _copy_block(h, src, layerBias, _md([1, pk.H], [pk.H, 1], pk.bias_offset(layer, bid)), w)


# -- execution -----------------------------------------------------------------------------------
def _space(where: str, h: Handle, name: str, mem, nbytes, need: int, query: str) -> None:
    n = check_int(where, name + "NumBytes", nbytes, 0)
    if n < need:
        bad(f"{where}: {name}NumBytes is {n}, {query} asks for {need}")
    check_memory(where, name, h, mem)
    if memory_bytes(mem) < n:
        bad(f"{where}: {name} holds {memory_bytes(mem)} bytes, {name}NumBytes says {n}")


def _rows(where: str, name: str, h: Handle, mem, rows: int, cols: int) -> None:
    check_memory(where, name, h, mem)
    view(where, name, h, _rows_md(rows, cols), mem)


def _dropout_desc(r: RNNDescriptor, sh: _Shape) -> DropoutDescriptor | None:
    return r.dropout_desc if sh.p > 0 else None


@api
def miopenRNNForwardTraining(handle: Handle, rnnDesc: RNNDescriptor, sequenceLen: int,
                             xDesc: list, x: memory, hxDesc, hx, cxDesc, cx, wDesc, w: memory,
                             yDesc: list, y: memory, hyDesc, hy, cyDesc, cy, workSpace: memory,
                             workSpaceNumBytes: int, reserveSpace: memory,
                             reserveSpaceNumBytes: int) -> None:
    """Forward pass keeping in ``reserveSpace`` what the backward calls read; dropout (V2
    descriptors) draws a new mask per call."""
    _forward("miopenRNNForwardTraining", True, handle, rnnDesc, sequenceLen, xDesc, x, hxDesc,
             hx, cxDesc, cx, wDesc, w, yDesc, y, hyDesc, hy, cyDesc, cy, workSpace,
             workSpaceNumBytes, reserveSpace, reserveSpaceNumBytes)


@api
def miopenRNNForwardInference(handle: Handle, rnnDesc: RNNDescriptor, sequenceLen: int,
                              xDesc: list, x: memory, hxDesc, hx, cxDesc, cx, wDesc, w: memory,
                              yDesc: list, y: memory, hyDesc, hy, cyDesc, cy, workSpace: memory,
                              workSpaceNumBytes: int) -> None:
    """Forward pass: y (packed rows), and hy/cy at each sequence's last step unless None."""
    _forward("miopenRNNForwardInference", False, handle, rnnDesc, sequenceLen, xDesc, x, hxDesc,
             hx, cxDesc, cx, wDesc, w, yDesc, y, hyDesc, hy, cyDesc, cy, workSpace,
             workSpaceNumBytes, None, None)


def _forward(where, training, handle, rnnDesc, seqLen, xDesc, x, hxDesc, hx, cxDesc, cx, wDesc,
             w, yDesc, y, hyDesc, hy, cyDesc, cy, workSpace, wsBytes, reserve, rsBytes) -> None:
    h, r = check_handle(where, handle), _check_rnn(where, rnnDesc)
    sh = _shape(where, r, seqLen, xDesc)
    pk = sh.pk
    _steps(where, "yDesc", yDesc, len(sh.batches), pk.D * pk.H, sh.batches)
    _rows(where, "x", h, x, sh.S, pk.I)
    _rows(where, "y", h, y, sh.S, pk.D * pk.H)
    _weights(where, h, pk, wDesc, w)
    lstm = pk.mode == _M.miopenLSTM
    st = {"hx": _state(where, "hx", sh, hxDesc, hx, h),
          "hy": _state(where, "hy", sh, hyDesc, hy, h)}
    if lstm:   # other cells have no cell state: MIOpen ignores cx and cy there
        st["cx"] = _state(where, "cx", sh, cxDesc, cx, h)
        st["cy"] = _state(where, "cy", sh, cyDesc, cy, h)
    net = _net(h, sh)
    _space(where, h, "workSpace", workSpace, wsBytes, net.workspace_bytes,
           "miopenGetRNNWorkspaceSize")
    if training:
        _space(where, h, "reserveSpace", reserve, rsBytes, net.reserve()[0],
               "miopenGetRNNTrainingReserveSize")
    steps, prims = net.forward_steps(training, st)
    bound = {"x": x, "y": y, "w": w, "hx": hx, "hy": hy, "cx": cx, "cy": cy,
             "reserve": reserve}
    dd = _dropout_desc(r, sh) if training else None
    if dd is not None:
        for p in prims:   # call k draws counter blocks from k * masks-per-call on
            p.dropout_offset = dd.calls
    _run(h, steps, bound)
    if dd is not None:
        dd.calls += 1


#: handle -> {id of a workspace buffer: the problem whose gradients BackwardData left there}
_GRADIENTS: "weakref.WeakKeyDictionary[Handle, dict]" = weakref.WeakKeyDictionary()


@api
def miopenRNNBackwardData(handle: Handle, rnnDesc: RNNDescriptor, sequenceLen: int,
                          yDesc: list, y: memory, dyDesc: list, dy: memory, dhyDesc, dhy,
                          dcyDesc, dcy, wDesc, w: memory, hxDesc, hx, cxDesc, cx, dxDesc: list,
                          dx: memory, dhxDesc, dhx, dcxDesc, dcx, workSpace: memory,
                          workSpaceNumBytes: int, reserveSpace: memory,
                          reserveSpaceNumBytes: int) -> None:
    """Gradients of x (and of hx, cx unless dhx, dcx are None) from dy (and dhy, dcy; None is
    zero), after ForwardTraining with the same reserve. The weight gradients are computed too
    and stay in ``workSpace`` for :func:`miopenRNNBackwardWeights`."""
    where = "miopenRNNBackwardData"
    h, r = check_handle(where, handle), _check_rnn(where, rnnDesc)
    sh = _shape(where, r, sequenceLen, dxDesc, "dxDesc")
    pk = sh.pk
    for name in ("yDesc", "dyDesc"):
        _steps(where, name, yDesc if name == "yDesc" else dyDesc, len(sh.batches),
               pk.D * pk.H, sh.batches)
    _rows(where, "y", h, y, sh.S, pk.D * pk.H)
    _rows(where, "dy", h, dy, sh.S, pk.D * pk.H)
    _rows(where, "dx", h, dx, sh.S, pk.I)
    _weights(where, h, pk, wDesc, w)
    st = {"hx": _state(where, "hx", sh, hxDesc, hx, h),
          "dhy": _state(where, "dhy", sh, dhyDesc, dhy, h),
          "dhx": _state(where, "dhx", sh, dhxDesc, dhx, h)}
    if pk.mode == _M.miopenLSTM:
        st["cx"] = _state(where, "cx", sh, cxDesc, cx, h)
        st["dcy"] = _state(where, "dcy", sh, dcyDesc, dcy, h)
        st["dcx"] = _state(where, "dcx", sh, dcxDesc, dcx, h)
        if dcy is None:
            # a zero dcy rather than none: pydnnl's LSTM backward with sequence lengths and no
            # diff_dst_iter_c leaves the cell gradient of sequences ending early unset
            md = MemoryDesc([pk.L * pk.D, sh.N, pk.H], _F32, "abc")
            dcy = h.temp(("rnn_zero_state", md), md, np.zeros(md.dims, np.float32))
            st["dcy"] = _md(md.dims, md.strides)
    net = _net(h, sh)
    _space(where, h, "workSpace", workSpace, workSpaceNumBytes, net.workspace_bytes,
           "miopenGetRNNWorkspaceSize")
    _space(where, h, "reserveSpace", reserveSpace, reserveSpaceNumBytes, net.reserve()[0],
           "miopenGetRNNTrainingReserveSize")
    steps = net.backward_steps(st)
    _run(h, steps, {"y": y, "dy": dy, "dx": dx, "w": w, "hx": hx, "cx": cx,
                    "dhy": dhy, "dcy": dcy, "dhx": dhx, "dcx": dcx, "workspace": workSpace,
                    "reserve": reserveSpace})
    _GRADIENTS.setdefault(h, {})[id(workSpace.buffer)] = sh


@api
def miopenRNNBackwardWeights(handle: Handle, rnnDesc: RNNDescriptor, sequenceLen: int,
                             xDesc: list, x: memory, hxDesc, hx, yDesc: list, y: memory,
                             dwDesc, dw: memory, workSpace: memory, workSpaceNumBytes: int,
                             reserveSpace: memory, reserveSpaceNumBytes: int) -> None:
    """Writes the weight gradients into ``dw`` in MIOpen's packing, overwriting all of it (the
    gradient of each summed bias goes to both biases of its pair). Call it after
    :func:`miopenRNNBackwardData` with the same workspace."""
    where = "miopenRNNBackwardWeights"
    h, r = check_handle(where, handle), _check_rnn(where, rnnDesc)
    sh = _shape(where, r, sequenceLen, xDesc)
    pk = sh.pk
    _steps(where, "yDesc", yDesc, len(sh.batches), pk.D * pk.H, sh.batches)
    _rows(where, "x", h, x, sh.S, pk.I)
    _rows(where, "y", h, y, sh.S, pk.D * pk.H)
    _state(where, "hx", sh, hxDesc, hx, h)
    _weights(where, h, pk, dwDesc, dw, "dw")
    net = _net(h, sh)
    _space(where, h, "workSpace", workSpace, workSpaceNumBytes, net.workspace_bytes,
           "miopenGetRNNWorkspaceSize")
    _space(where, h, "reserveSpace", reserveSpace, reserveSpaceNumBytes, net.reserve()[0],
           "miopenGetRNNTrainingReserveSize")
    if _GRADIENTS.get(h, {}).get(id(workSpace.buffer)) != sh:
        bad(f"{where}: workSpace holds no weight gradients of this problem: call "
            f"miopenRNNBackwardData with the same handle, problem and workSpace first")
    _run(h, net.gradient_steps(), {"workspace": workSpace, "dw": dw})


__all__ = ["miopenRNNDescriptor_t", "miopenDropoutDescriptor_t", "miopenRNGType_t",
           "MIOPEN_RNG_PSEUDO_XORWOW", "miopenCreateRNNDescriptor", "miopenGetRNNDescriptor",
           "miopenGetRNNDescriptor_V2", "miopenDestroyRNNDescriptor", "miopenSetRNNDescriptor",
           "miopenSetRNNDescriptor_V2", "miopenGetRNNWorkspaceSize",
           "miopenGetRNNTrainingReserveSize", "miopenGetRNNParamsSize",
           "miopenGetRNNParamsDescriptor", "miopenGetRNNInputTensorSize",
           "miopenGetRNNHiddenTensorSize", "miopenGetRNNLayerParamSize",
           "miopenGetRNNLayerBiasSize", "miopenGetRNNLayerParam", "miopenGetRNNLayerBias",
           "miopenSetRNNLayerParam", "miopenSetRNNLayerBias", "miopenGetRNNLayerParamOffset",
           "miopenGetRNNLayerBiasOffset", "miopenRNNForwardTraining", "miopenRNNBackwardData",
           "miopenRNNBackwardWeights", "miopenRNNForwardInference",
           "miopenCreateDropoutDescriptor", "miopenDestroyDropoutDescriptor",
           "miopenDropoutGetStatesSize", "miopenSetDropoutDescriptor",
           "miopenRestoreDropoutDescriptor", "miopenGetDropoutDescriptor"]
