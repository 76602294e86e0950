"""The pydnnl side of ``pydnnl.torch.LSTM``/``GRU``/``RNN``: primitives per problem, weight
translation, and one forward or backward pass over PyTorch tensors.

A *problem* is a module configuration plus the shapes of one call (T, N, packed lengths, which
initial states are given, training or inference, dropout). Its primitive descriptors and
primitives are created once and cached. Layers are grouped as PyTorch stacks them: one
primitive runs every run of consecutive layers with the same input width (layer 0 alone
unless ``input_size == D * R``); bidirectional groups use the per-layer bidirectional
extension, so layer l + 1 of both directions reads both directions of layer l.

Weights are handed to the primitives in PyTorch's own layout: ``weight_ih`` [G*H, in] of one
layer and direction is oneDNN's ``ldgoi`` and ``weight_hr`` [P, H] is ``ldoi``, so the
translation per call is one ``torch.cat`` per matrix kind and group (gate blocks reordered
for GRU) and one bias sum; the primitives read those layouts directly, and backward writes
the weight gradients in the same layouts.
"""
from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace

import torch

from .. import constants as _c
from ..memory import memory
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc
from ..primitives import (
    lbr_gru_backward,
    lbr_gru_forward,
    lstm_backward,
    lstm_forward,
    vanilla_rnn_backward,
    vanilla_rnn_forward,
)
from ..primitives.rnn.extensions import rnn_extensions
from . import _bridge as B

_F32 = data_type.f32

# mode -> (forward, backward, activation, gates, bias gates, PyTorch gate block of each
# oneDNN gate): LSTM i, f, g, o are the same in both; PyTorch GRU r, z, n -> oneDNN u(=z), r, o(=n)
CELLS = {
    "LSTM": (lstm_forward, lstm_backward, None, 4, 4, (0, 1, 2, 3)),
    "GRU": (lbr_gru_forward, lbr_gru_backward, None, 3, 4, (1, 0, 2)),
    "RNN_TANH": (vanilla_rnn_forward, vanilla_rnn_backward, _c.algorithm.eltwise_tanh, 1, 1,
                 (0,)),
    "RNN_RELU": (vanilla_rnn_forward, vanilla_rnn_backward, _c.algorithm.eltwise_relu, 1, 1,
                 (0,)),
}
_CACHE_CAPACITY = 64


@dataclass(frozen=True)
class Config:
    """The module's configuration (what the constructor fixed)."""

    mode: str
    input_size: int
    hidden_size: int
    num_layers: int
    bias: bool
    directions: int
    proj_size: int

    @property
    def rec(self) -> int:
        """Width of h (and of each direction's output): proj_size or hidden_size."""
        return self.proj_size or self.hidden_size

    def layer_input(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.directions * self.rec

    def groups(self) -> list[range]:
        """Consecutive layers of equal input width, bottom to top: one primitive each."""
        out, start = [], 0
        for l in range(1, self.num_layers):
            if self.layer_input(l) != self.layer_input(start):
                out.append(range(start, l))
                start = l
        out.append(range(start, self.num_layers))
        return out


@dataclass(frozen=True)
class Problem:
    """One call's shapes on top of the configuration; the key of the primitive cache."""

    engine: object
    cfg: Config
    T: int
    N: int
    lengths: tuple[int, ...] | None  # packed: the sorted sequence lengths
    has_h0: bool
    has_c0: bool
    training: bool  # forward_training (a backward may follow, or dropout is on)
    dropout: float  # p where dropout is active (training mode, p > 0, L > 1), else 0


def _md(dims, tag) -> MemoryDesc:
    return _md_cached(tuple(int(d) for d in dims), tag)


@functools.lru_cache(maxsize=1024)
def _md_cached(dims: tuple[int, ...], tag: str) -> MemoryDesc:
    return MemoryDesc(list(dims), _F32, tag)


_same: dict = {}


def _same_layout(md: MemoryDesc, plain: MemoryDesc) -> bool:
    """``md == plain``, remembered per pair: the descs live in plans and in the bridge's cache,
    and comparing them on every call costs more than a small step's kernels."""
    key = (id(md), id(plain))
    hit = _same.get(key)
    if hit is None or hit[0] is not md or hit[1] is not plain:
        if len(_same) > 4096:
            _same.clear()
        hit = _same[key] = (md, plain, md is plain or md == plain)  # holds both: ids stay valid
    return hit[2]


class _Group:
    """The primitives of one group of layers."""

    def __init__(self, prob: Problem, layers: range, index: int, last: bool):
        cfg = prob.cfg
        fwd_cls, bwd_cls, act, G, Gb, _ = CELLS[cfg.mode]
        self.layers = layers
        L, D, H, R, P = len(layers), cfg.directions, cfg.hidden_size, cfg.rec, cfg.proj_size
        T, N = prob.T, prob.N
        C = cfg.layer_input(layers.start)
        lstm = cfg.mode == "LSTM"
        ext = rnn_extensions(layer_bidirectional=D == 2, no_bias=not cfg.bias,
                             seq_lengths=prob.lengths, packed=prob.lengths is not None)
        if prob.dropout:
            # PyTorch drops every layer's output but the network's last: a group below the
            # top drops its own top output too; each group draws from its own Philox key
            ext = replace(ext, dropout=prob.dropout, dropout_seed=index,
                          dropout_output=not last)
        self.dropout_active = bool(prob.dropout) and (L > 1 or not last)
        rows = sum(prob.lengths) if prob.lengths is not None else None
        data = (lambda c: _md([rows, c], "ab")) if rows is not None else (  # noqa: E731
            lambda c: _md([T, N, c], "tnc"))
        self.src_md, self.dst_md = data(C), data(D * R)
        self.descs = {
            "src_layer_desc": self.src_md,
            "src_iter_desc": _md([L, D, N, R], "ldnc") if prob.has_h0 else None,
            "weights_layer_desc": _md([L, D, C, G, H], "ldgoi"),
            "weights_iter_desc": _md([L, D, R, G, H], "ldgoi"),
            "bias_desc": _md([L, D, Gb, H], "ldgo") if cfg.bias else None,
            "dst_layer_desc": self.dst_md,
            "dst_iter_desc": _md([L, D, N, R], "ldnc"),
        }
        if lstm:
            self.descs["src_iter_c_desc"] = _md([L, D, N, H], "ldnc") if prob.has_c0 else None
            self.descs["dst_iter_c_desc"] = _md([L, D, N, H], "ldnc")
            if P:
                self.descs["weights_projection_desc"] = _md([L, D, H, P], "ldoi")
        direction = (_c.rnn_direction.bidirectional_concat if D == 2
                     else _c.rnn_direction.unidirectional_left2right)
        head = (act,) if act is not None else ()
        eng = prob.engine
        prop = (_c.prop_kind.forward_training if prob.training
                else _c.prop_kind.forward_inference)
        self.fpd = fwd_cls.primitive_desc(eng, prop, *head, direction, **self.descs,
                                          extensions=ext)
        self.fwd = fwd_cls(self.fpd)
        self.bwd = None
        if prob.training:
            diffs = {"diff_" + k: v for k, v in self.descs.items()}
            self.bpd = bwd_cls.primitive_desc(
                eng, _c.prop_kind.backward, *head, direction, **self.descs, **diffs,
                hint_fwd_pd=self.fpd, flags=_c.rnn_flags.diff_weights_overwrite)
            self._bwd_cls = bwd_cls

    def backward_primitive(self):
        # created at the first backward: inference-only training calls (dropout under
        # no_grad) never pay for it
        if self.bwd is None:
            self.bwd = self._bwd_cls(self.bpd)
        return self.bwd


class RnnPrimitives:
    """The primitives of one problem, and its forward and backward passes."""

    def __init__(self, prob: Problem):
        self.prob = prob
        self.lock = threading.Lock()
        groups = prob.cfg.groups()
        self.groups = [_Group(prob, g, i, i == len(groups) - 1) for i, g in enumerate(groups)]


_cache: "OrderedDict[Problem, RnnPrimitives]" = OrderedDict()
_cache_lock = threading.Lock()


def plan_for(prob: Problem) -> RnnPrimitives:
    """The cached plan of ``prob`` (built at the first call of a problem)."""
    with _cache_lock:
        plan = _cache.get(prob)
        if plan is not None:
            _cache.move_to_end(prob)
            return plan
    plan = RnnPrimitives(prob)  # outside the lock: creating primitives compiles kernels
    with _cache_lock:
        plan = _cache.setdefault(prob, plan)
        while len(_cache) > _CACHE_CAPACITY:
            _cache.popitem(last=False)
    return plan


def cache_info() -> dict:
    """``{"problems": plans cached}``."""
    with _cache_lock:
        return {"problems": len(_cache)}


def cache_clear() -> None:
    with _cache_lock:
        _cache.clear()


# ------------------------------------------------------------------------------------------------
# weights: PyTorch's per-layer tensors <-> the group tensors the primitives read
# ------------------------------------------------------------------------------------------------
def _gate_blocks(w: torch.Tensor, order, H: int) -> list[torch.Tensor]:
    """``w``'s gate blocks (rows, or elements of a bias) in oneDNN's gate order."""
    if list(order) == list(range(len(order))):  # LSTM, vanilla: PyTorch's order as it is
        return [w]
    return [w[g * H:(g + 1) * H] for g in order]


def translate_weights(cfg: Config, layers: range, params: dict) -> dict:
    """The tensors of one group in the primitives' layouts (new contiguous float32 tensors):
    ``wl`` [L, D, G, H, C] (ldgoi), ``wi`` [L, D, G, H, R], ``bias`` [L, D, Gb, H] (ldgo),
    ``wp`` [L, D, P, H] (ldoi). ``params`` maps PyTorch's parameter names to tensors."""
    _, _, _, G, Gb, order = CELLS[cfg.mode]
    H, D = cfg.hidden_size, cfg.directions
    keys = [(l, d) for l in layers for d in range(D)]
    sfx = lambda l, d: f"_l{l}" + ("_reverse" if d else "")  # noqa: E731

    def cat(name):
        blocks = []
        for l, d in keys:
            blocks += _gate_blocks(params[name + sfx(l, d)], order, H)
        return torch.cat(blocks).detach().to(torch.float32).reshape(len(layers), D, G, H, -1)

    out = {"wl": cat("weight_ih"), "wi": cat("weight_hh")}
    if cfg.bias:
        rows = []
        for l, d in keys:
            b_ih, b_hh = params["bias_ih" + sfx(l, d)], params["bias_hh" + sfx(l, d)]
            if cfg.mode == "GRU":  # u, r sum; o and u' are PyTorch's b_in and b_hn apart
                rows.append(torch.cat([(b_ih[:2 * H] + b_hh[:2 * H]).view(2, H)[[1, 0]],
                                       b_ih[2 * H:].view(1, H), b_hh[2 * H:].view(1, H)]))
            else:
                rows.append((b_ih + b_hh).view(G, H))
        out["bias"] = torch.stack(rows).detach().to(torch.float32).reshape(len(layers), D, Gb, H)
    if cfg.proj_size:
        out["wp"] = torch.stack([params["weight_hr" + sfx(l, d)] for l, d in keys]).detach().to(
            torch.float32).reshape(len(layers), D, cfg.proj_size, H)
    return out


def untranslate_grads(cfg: Config, layers: range, grads: dict) -> dict:
    """The inverse of :func:`translate_weights` for gradients: PyTorch name -> gradient."""
    _, _, _, G, _, order = CELLS[cfg.mode]
    H, D = cfg.hidden_size, cfg.directions
    inverse = [order.index(g) for g in range(G)]  # oneDNN gate holding PyTorch block g
    out = {}
    for i, l in enumerate(layers):
        for d in range(D):
            sfx = f"_l{l}" + ("_reverse" if d else "")
            for name, key in (("weight_ih", "wl"), ("weight_hh", "wi")):
                g = grads[key][i, d]  # [G, H, C]
                out[name + sfx] = g[inverse].reshape(G * H, -1)
            if cfg.bias:
                b = grads["bias"][i, d]  # [Gb, H]
                if cfg.mode == "GRU":
                    out["bias_ih" + sfx] = torch.cat([b[1], b[0], b[2]])
                    out["bias_hh" + sfx] = torch.cat([b[1], b[0], b[3]])
                else:  # the summed bias: both PyTorch biases get its gradient
                    out["bias_ih" + sfx] = b.reshape(-1)
                    out["bias_hh" + sfx] = b.reshape(-1).clone()
            if cfg.proj_size:
                out["weight_hr" + sfx] = grads["wp"][i, d]
    return out


# ------------------------------------------------------------------------------------------------
# passes
# ------------------------------------------------------------------------------------------------
def _memory(t: torch.Tensor, eng, md: MemoryDesc, keep: list) -> memory:
    """``t`` (laid out as ``md`` says, contiguous) as a memory of ``md``: shared with the tensor
    on a CPU engine. The plain memory that owns the buffer goes into ``keep``."""
    t = t.detach().to(torch.float32).contiguous()
    base = B.to_memory(t, eng)
    keep.append(base)
    return base if _same_layout(md, base.get_desc()) else memory(md, eng, base.get_data_handle())


def _output(shape, eng, md: MemoryDesc, keep: list):
    """(memory of ``md``, tensor read back from it, plain memory that owns the buffer)."""
    base, t = B.empty_memory(shape, eng)
    keep.append(base)
    m = base if _same_layout(md, base.get_desc()) else memory(md, eng, base.get_data_handle())
    return m, t, base


@dataclass
class Saved:
    """What backward needs of one forward call."""

    args: list  # per group: the forward argument map (workspace included)
    keep: list  # memories owning buffers the argument maps view


def forward(plan: RnnPrimitives, x: torch.Tensor, h0, c0, params: dict, dropout_offset: int | None):
    """One forward pass: ``(y, h_n, c_n or None, Saved or None)``; tensors are float32 CPU.

    ``x`` [T, N, C] or packed [rows, C]; ``h0`` [L*D, N, R], ``c0`` [L*D, N, H] or None.
    ``dropout_offset`` selects the dropout masks (each group's Philox counter start).
    """
    prob = plan.prob
    cfg, eng = prob.cfg, prob.engine
    s = B.stream_of(eng)
    L, D, N, H, R = cfg.num_layers, cfg.directions, prob.N, cfg.hidden_size, cfg.rec
    lstm = cfg.mode == "LSTM"
    keep: list = []
    reads: list = []  # (memory, tensor) pairs to read back once the stream is done
    h0v = h0.reshape(L, D, N, R) if h0 is not None else None
    c0v = c0.reshape(L, D, N, H) if c0 is not None else None
    src = _memory(x, eng, plan.groups[0].src_md, keep)
    saved_args, hn_parts, cn_parts, y = [], [], [], None
    with plan.lock:
        for gi, g in enumerate(plan.groups):
            lo, hi = g.layers.start, g.layers.stop
            w = translate_weights(cfg, g.layers, params)
            d = g.descs
            args = {_c.ARG_SRC_LAYER: src,
                    _c.ARG_WEIGHTS_LAYER: _memory(w["wl"], eng, d["weights_layer_desc"], keep),
                    _c.ARG_WEIGHTS_ITER: _memory(w["wi"], eng, d["weights_iter_desc"], keep)}
            if cfg.bias:
                args[_c.ARG_BIAS] = _memory(w["bias"], eng, d["bias_desc"], keep)
            if cfg.proj_size:
                args[_c.ARG_WEIGHTS_PROJECTION] = _memory(w["wp"], eng,
                                                          d["weights_projection_desc"], keep)
            if h0v is not None:
                args[_c.ARG_SRC_ITER] = _memory(h0v[lo:hi], eng, d["src_iter_desc"], keep)
            if lstm and c0v is not None:
                args[_c.ARG_SRC_ITER_C] = _memory(c0v[lo:hi], eng, d["src_iter_c_desc"], keep)
            m, t, base = _output([hi - lo, D, N, R], eng, d["dst_iter_desc"], keep)
            args[_c.ARG_DST_ITER] = m
            reads.append((base, t))
            hn_parts.append(t)
            if lstm:
                m, t, base = _output([hi - lo, D, N, H], eng, d["dst_iter_c_desc"], keep)
                args[_c.ARG_DST_ITER_C] = m
                reads.append((base, t))
                cn_parts.append(t)
            if gi == len(plan.groups) - 1:
                m, y, base = _output(g.dst_md.get_dims(), eng, g.dst_md, keep)
                reads.append((base, y))
            else:  # stays on the device: the next group's input
                m = memory(g.dst_md, eng)
            args[_c.ARG_DST_LAYER] = m
            if prob.training:
                args[_c.ARG_WORKSPACE] = memory(g.fpd.workspace_desc(), eng)
            if g.dropout_active and dropout_offset is not None:
                g.fwd.dropout_offset = dropout_offset
            g.fwd.execute(s, args)
            saved_args.append(args)
            src = m
    s.wait()
    for base, t in reads:
        B.to_torch(base, t, s, finished=True)
    hn = torch.cat(hn_parts).reshape(L * D, N, R)
    cn = torch.cat(cn_parts).reshape(L * D, N, H) if lstm else None
    saved = Saved(saved_args, keep) if prob.training else None
    return y, hn, cn, saved


def backward(plan: RnnPrimitives, saved: Saved, dy: torch.Tensor, dhn: torch.Tensor, dcn):
    """Gradients of one forward pass: ``(dx, dh0 or None, dc0 or None, {param name: grad})``.

    ``dy`` has the shape of the forward's y, ``dhn``/``dcn`` of h_n/c_n.
    """
    prob = plan.prob
    cfg, eng = prob.cfg, prob.engine
    s = B.stream_of(eng)
    L, D, N, H, R = cfg.num_layers, cfg.directions, prob.N, cfg.hidden_size, cfg.rec
    lstm = cfg.mode == "LSTM"
    keep = list(saved.keep)
    reads: list = []
    dhnv = dhn.reshape(L, D, N, R)
    dcnv = dcn.reshape(L, D, N, H) if lstm else None
    top = plan.groups[-1]
    diff_dst = _memory(dy, eng, top.dst_md, keep)
    dx = None
    dh0_parts, dc0_parts, wgrads = [], [], {}
    with plan.lock:
        for gi in range(len(plan.groups) - 1, -1, -1):
            g = plan.groups[gi]
            lo, hi = g.layers.start, g.layers.stop
            bd = g.bpd
            args = dict(saved.args[gi])
            args[_c.ARG_DIFF_DST_LAYER] = diff_dst
            args[_c.ARG_DIFF_DST_ITER] = _memory(dhnv[lo:hi], eng, bd.diff_dst_iter_desc(), keep)
            if lstm:
                args[_c.ARG_DIFF_DST_ITER_C] = _memory(dcnv[lo:hi], eng,
                                                       bd.diff_dst_iter_c_desc(), keep)
            if gi == 0:
                m, dx, base = _output(g.src_md.get_dims(), eng, bd.diff_src_layer_desc(), keep)
                reads.append((base, dx))
            else:
                m = memory(bd.diff_src_layer_desc(), eng)
            args[_c.ARG_DIFF_SRC_LAYER] = m
            if prob.has_h0:
                mm, t, base = _output([hi - lo, D, N, R], eng, bd.diff_src_iter_desc(), keep)
                args[_c.ARG_DIFF_SRC_ITER] = mm
                reads.append((base, t))
                dh0_parts.insert(0, t)
            if lstm and prob.has_c0:
                mm, t, base = _output([hi - lo, D, N, H], eng, bd.diff_src_iter_c_desc(), keep)
                args[_c.ARG_DIFF_SRC_ITER_C] = mm
                reads.append((base, t))
                dc0_parts.insert(0, t)
            grads = {}
            for key, arg, name in (("wl", _c.ARG_DIFF_WEIGHTS_LAYER, "weights_layer_desc"),
                                   ("wi", _c.ARG_DIFF_WEIGHTS_ITER, "weights_iter_desc"),
                                   ("bias", _c.ARG_DIFF_BIAS, "bias_desc"),
                                   ("wp", _c.ARG_DIFF_WEIGHTS_PROJECTION,
                                    "weights_projection_desc")):
                md = g.descs.get(name)
                if md is None:
                    continue
                # ldgoi / ldgo / ldoi: the plain tensor holds them in PyTorch's order
                shape = _physical_shape(md)
                mm, t, base = _output(shape, eng, getattr(bd, "diff_" + name)(), keep)
                args[arg] = mm
                reads.append((base, t))
                grads[key] = t
            g.backward_primitive().execute(s, args)
            diff_dst = m
            wgrads[g.layers] = grads
    s.wait()
    for base, t in reads:
        B.to_torch(base, t, s, finished=True)
    named = {}
    for g in plan.groups:
        named.update(untranslate_grads(cfg, g.layers, wgrads[g.layers]))
    dh0 = torch.cat(dh0_parts).reshape(L * D, N, R) if dh0_parts else None
    dc0 = torch.cat(dc0_parts).reshape(L * D, N, H) if dc0_parts else None
    return dx, dh0, dc0, named


def _physical_shape(md: MemoryDesc) -> list[int]:
    """The row-major shape of a desc in the ldgoi / ldoi / ldgo layouts used here."""
    dims = md.get_dims()
    if len(dims) == 5 and md == _md(dims, "ldgoi"):  # [L, D, I, G, O] stored ldgoi
        return [dims[0], dims[1], dims[3], dims[4], dims[2]]
    if len(dims) == 4 and md == _md(dims, "ldoi"):  # [L, D, I, O] stored ldoi
        return [dims[0], dims[1], dims[3], dims[2]]
    return list(dims)
