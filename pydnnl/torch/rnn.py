"""``torch.nn.LSTM``, ``GRU`` and ``RNN`` running on pydnnl's RNN primitives, with autograd.

The modules have ``torch.nn``'s constructor arguments, parameter names, shapes,
initialization and ``state_dict`` (``weight_ih_l0``, ``bias_hh_l1_reverse``, ``weight_hr_l0``,
...), so ``load_state_dict`` of a ``torch.nn`` model's weights works unchanged, and the same
``forward`` conventions: batched or unbatched input, ``batch_first``, ``PackedSequence`` in
and out, ``(output, h_n)`` or ``(output, (h_n, c_n))``. The computation runs in
``lstm_forward`` (with a projection for ``proj_size``), ``lbr_gru_forward`` or
``vanilla_rnn_forward`` and their backward primitives on the module's pydnnl engine.
"""
from __future__ import annotations

import copy
import math
import numbers
import warnings

import torch
from torch.autograd.function import once_differentiable
from torch.nn.utils.rnn import PackedSequence

from ..error import invalid_arguments, unimplemented
from . import _bridge as B
from . import _rnn_plan as P

__all__ = ["LSTM", "GRU", "RNN"]


def draw_dropout_offset() -> int:
    """The Philox counter start of one training call's dropout masks, drawn from PyTorch's
    default generator (so ``torch.manual_seed`` makes the masks reproducible)."""
    return int(torch.randint(0, 2 ** 40, (1,)).item())


class _RNNFunction(torch.autograd.Function):
    """One call of the whole stack: inputs ``x, h0, c0, *weights``; outputs ``y, h_n, c_n``."""

    @staticmethod
    def forward(ctx, plan, names, offset, x, h0, c0, *weights):
        params = dict(zip(names, weights))
        y, hn, cn, saved = P.forward(plan, x, h0, c0, params, offset)
        ctx.plan, ctx.names, ctx.saved = plan, names, saved
        # on a CPU engine the primitives read these tensors' storage in place: saving them
        # lets PyTorch's version counters catch an in-place change before backward
        ctx.save_for_backward(x, h0, c0)
        # gradients go back to where (and in the type) each input came from
        ctx.places = [(t.device, t.dtype) if t is not None else None
                      for t in (x, h0, c0, *weights)]
        if cn is None:
            return y, hn
        return y, hn, cn

    @staticmethod
    @once_differentiable
    def backward(ctx, dy, dhn, dcn=None):
        if ctx.saved is None:
            raise unimplemented(
                "pydnnl.torch RNN: a second backward through one forward call (retain_graph=True)"
                " is not supported: the backward primitive consumes the forward's workspace; "
                "run the forward again")
        ctx.saved_tensors  # noqa: B018 - raises if x, h_0 or c_0 changed in place
        saved, ctx.saved = ctx.saved, None
        dx, dh0, dc0, named = P.backward(ctx.plan, saved, dy, dhn, dcn)
        grads = [dx, dh0, dc0] + [named[n] for n in ctx.names]
        grads = [g.to(*place) if g is not None and place is not None else None
                 for g, place in zip(grads, ctx.places)]
        return (None, None, None, *grads)


def _int_arg(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise invalid_arguments(f"{name} must be an int >= {minimum}, got {value!r}")
    if value < minimum:
        raise invalid_arguments(f"{name} must be an int >= {minimum}, got {value}")
    return int(value)


class _RNNBase(torch.nn.Module):
    """Shared constructor, parameters and forward of the three modules."""

    def __init__(self, mode: str, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, proj_size=0,
                 engine=None, device=None, dtype=None):
        super().__init__()
        kind = type(self).__name__
        input_size = _int_arg(input_size, f"{kind}: input_size", 1)
        hidden_size = _int_arg(hidden_size, f"{kind}: hidden_size", 1)
        num_layers = _int_arg(num_layers, f"{kind}: num_layers", 1)
        proj_size = _int_arg(proj_size, f"{kind}: proj_size", 0)
        if proj_size >= hidden_size:
            raise invalid_arguments(
                f"{kind}: proj_size must be smaller than hidden_size ({hidden_size}), "
                f"got {proj_size}")
        if (isinstance(dropout, bool) or not isinstance(dropout, numbers.Real)
                or not 0 <= dropout <= 1 or math.isnan(dropout)):
            raise invalid_arguments(f"{kind}: dropout must be a number in [0, 1], got {dropout!r}")
        if dropout == 1:
            # pydnnl's dropout keeps a scale of 1 / (1 - p)
            raise unimplemented(f"{kind}: dropout must be < 1, got 1 (every output dropped)")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"{kind}: dropout={dropout} has no effect with num_layers=1 (dropout "
                          f"applies between layers)", stacklevel=3)
        for name, v in (("bias", bias), ("batch_first", batch_first),
                        ("bidirectional", bidirectional)):
            if not isinstance(v, (bool, int)) or v not in (0, 1):
                raise invalid_arguments(f"{kind}: {name} must be a bool, got {v!r}")
        if dtype is not None and dtype != torch.float32:
            raise unimplemented(f"{kind}: dtype must be torch.float32 (pydnnl computes in f32), "
                                f"got {dtype}")
        self.mode = mode
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first = bool(bias), bool(batch_first)
        self.dropout, self.bidirectional = float(dropout), bool(bidirectional)
        self.proj_size = proj_size
        self.engine = B.resolve_engine(engine)
        G = {"LSTM": 4, "GRU": 3}.get(mode, 1)
        D = 2 if bidirectional else 1
        R = proj_size or hidden_size
        self._flat_weights_names: list[str] = []
        kw = {"device": device, "dtype": torch.float32}
        # PyTorch's registration order: the state_dict order and what reset_parameters draws
        for layer in range(num_layers):
            for d in range(D):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                C = input_size if layer == 0 else D * R
                shapes = [("weight_ih", (G * hidden_size, C)), ("weight_hh", (G * hidden_size, R))]
                if bias:
                    shapes += [("bias_ih", (G * hidden_size,)), ("bias_hh", (G * hidden_size,))]
                if proj_size:
                    shapes.append(("weight_hr", (proj_size, hidden_size)))
                for name, shape in shapes:
                    setattr(self, name + sfx, torch.nn.Parameter(torch.empty(shape, **kw)))
                    self._flat_weights_names.append(name + sfx)
        self.reset_parameters()

    def __deepcopy__(self, memo):
        # an engine is a device handle, not data: a copy of the module runs on the same one
        memo.setdefault(id(self.engine), self.engine)
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__setstate__(copy.deepcopy(self.__dict__, memo))
        return new

    def __reduce_ex__(self, protocol):
        raise unimplemented(f"{type(self).__name__}: a module holding a pydnnl engine cannot be "
                            f"pickled; save its state_dict() (the same as torch.nn's) instead")

    @classmethod
    def from_torch(cls, module: torch.nn.Module, engine=None) -> "_RNNBase":
        """A module of this class with ``module``'s configuration and (float32) weights: the
        counterpart of a ``torch.nn.LSTM`` / ``GRU`` / ``RNN``, in training or eval mode as it."""
        want = getattr(torch.nn, cls.__name__)
        if type(module) is not want:
            raise invalid_arguments(f"{cls.__name__}.from_torch: expected a torch.nn."
                                    f"{cls.__name__}, got {type(module).__name__}")
        kw = dict(num_layers=module.num_layers, bias=module.bias, batch_first=module.batch_first,
                  dropout=module.dropout, bidirectional=module.bidirectional, engine=engine)
        if cls is LSTM:
            kw["proj_size"] = module.proj_size
        if cls is RNN:
            kw["nonlinearity"] = module.nonlinearity
        with warnings.catch_warnings():  # torch warned about dropout with one layer already
            warnings.simplefilter("ignore")
            ours = cls(module.input_size, module.hidden_size, **kw)
        ours.load_state_dict({k: v.detach().to("cpu", torch.float32)
                              for k, v in module.state_dict().items()})
        return ours.train(module.training)

    @property
    def _flat_weights(self) -> list[torch.nn.Parameter]:
        """The parameters in ``_flat_weights_names`` order (layer, direction, then ih, hh,
        bias ih, bias hh, hr), as ``torch.nn``'s modules keep them."""
        return [getattr(self, n) for n in self._flat_weights_names]

    def flatten_parameters(self) -> None:
        """A no-op, for code written for cuDNN: the weights are translated at every call."""

    def reset_parameters(self) -> None:
        """PyTorch's initialization: every parameter uniform in +-1/sqrt(hidden_size)."""
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0.0
        for w in self.parameters():
            torch.nn.init.uniform_(w, -bound, bound)

    @property
    def all_weights(self) -> list[list[torch.nn.Parameter]]:
        """The parameters per layer and direction, as ``torch.nn``'s ``all_weights``."""
        per = len(self._flat_weights_names) // (self.num_layers * (2 if self.bidirectional
                                                                   else 1))
        ws = [getattr(self, n) for n in self._flat_weights_names]
        return [ws[i:i + per] for i in range(0, len(ws), per)]

    def extra_repr(self) -> str:
        """As ``torch.nn``'s (which leaves out ``nonlinearity``)."""
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        for name, default in (("bias", True), ("batch_first", False), ("dropout", 0.0),
                              ("bidirectional", False)):
            if getattr(self, name) != default:
                s += f", {name}={getattr(self, name)}"
        return s

    # -- forward ---------------------------------------------------------------------------------
    def _config(self) -> P.Config:
        return P.Config(self.mode, self.input_size, self.hidden_size, self.num_layers,
                        self.bias, 2 if self.bidirectional else 1, self.proj_size)

    def _check_state(self, t, name: str, expected: tuple, batched: bool):
        kind = type(self).__name__
        if not isinstance(t, torch.Tensor):
            raise invalid_arguments(f"{kind}: {name} must be a torch.Tensor, got "
                                    f"{type(t).__name__}")
        want = expected if batched else (expected[0], expected[2])
        if tuple(t.shape) != want:
            raise invalid_arguments(f"{kind}: {name} must have shape {list(want)}, got "
                                    f"{list(t.shape)}")
        if t.dtype != torch.float32:
            raise invalid_arguments(f"{kind}: {name} must be torch.float32 (the parameters' "
                                    f"dtype), got {t.dtype}")

    def forward(self, input, hx=None):
        """``(output, h_n)``; LSTM: ``(output, (h_n, c_n))``. As ``torch.nn``'s forward."""
        kind = type(self).__name__
        lstm = self.mode == "LSTM"
        D = 2 if self.bidirectional else 1
        L, H, R = self.num_layers, self.hidden_size, self.proj_size or self.hidden_size
        packed = isinstance(input, PackedSequence)
        lengths = None
        sorted_idx = unsorted_idx = None
        if packed:
            x = input.data
            batch_sizes = input.batch_sizes
            sorted_idx, unsorted_idx = input.sorted_indices, input.unsorted_indices
            if x.dim() != 2:
                raise invalid_arguments(f"{kind}: PackedSequence data must be 2-D [rows, "
                                        f"input_size], got shape {list(x.shape)}")
            bs = [int(b) for b in batch_sizes]
            T, N = len(bs), bs[0]
            # sequence n (sorted order) runs while batch_sizes[t] > n
            lengths = tuple(sum(1 for b in bs if b > n) for n in range(N))
            batched = True
        else:
            if not isinstance(input, torch.Tensor):
                raise invalid_arguments(f"{kind}: input must be a torch.Tensor or a "
                                        f"PackedSequence, got {type(input).__name__}")
            if input.dim() not in (2, 3):
                raise invalid_arguments(f"{kind}: input must be 2-D (unbatched) or 3-D "
                                        f"(batched), got {input.dim()}-D with shape "
                                        f"{list(input.shape)}")
            batched = input.dim() == 3
            x = input if batched else input.unsqueeze(1)
            if batched and self.batch_first:
                x = x.transpose(0, 1)
            T, N = x.shape[0], x.shape[1]
        if x.dtype != torch.float32:
            raise invalid_arguments(f"{kind}: input must be torch.float32 (the parameters' "
                                    f"dtype), got {x.dtype}")
        if x.shape[-1] != self.input_size:
            raise invalid_arguments(f"{kind}: input.size(-1) must be equal to input_size "
                                    f"({self.input_size}), got {x.shape[-1]}")
        if T == 0 or N == 0:
            raise unimplemented(f"{kind}: empty input (sequence length {T}, batch {N})")

        h0 = c0 = None
        if hx is not None:
            if lstm:
                if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                    raise invalid_arguments(f"{kind}: hx must be a tuple (h_0, c_0), got "
                                            f"{type(hx).__name__}")
                h0, c0 = hx
                self._check_state(h0, "h_0", (L * D, N, R), batched)
                self._check_state(c0, "c_0", (L * D, N, H), batched)
            else:
                h0 = hx
                self._check_state(h0, "hx", (L * D, N, R), batched)
            if not batched:
                h0 = h0.unsqueeze(1)
                c0 = c0.unsqueeze(1) if c0 is not None else None
            if sorted_idx is not None:  # states follow the sorted batch order, as in PyTorch
                h0 = h0.index_select(1, sorted_idx)
                c0 = c0.index_select(1, sorted_idx) if c0 is not None else None

        weights = self._flat_weights
        for n, w in zip(self._flat_weights_names, weights):
            if w.dtype != torch.float32:
                raise unimplemented(f"{kind}: parameters must be torch.float32 (pydnnl computes "
                                    f"in f32), got {w.dtype} for {n}")
        tensors = [x, h0, c0] + weights
        needs_grad = torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in tensors)
        drop = self.dropout if (self.training and self.dropout > 0 and L > 1) else 0.0
        prob = P.Problem(self.engine, self._config(), T, N, lengths, h0 is not None,
                         c0 is not None, needs_grad or drop > 0, drop)
        plan = P.plan_for(prob)
        offset = draw_dropout_offset() if drop else None
        if needs_grad:
            outs = _RNNFunction.apply(plan, tuple(self._flat_weights_names), offset, x,
                                      h0, c0, *weights)
        else:
            params = dict(zip(self._flat_weights_names, weights))
            y, hn, cn, _ = P.forward(plan, x, h0, c0, params, offset)
            outs = (y, hn) if cn is None else (y, hn, cn)
        outs = [B.to_device(o, x) for o in outs]
        y, hn = outs[0], outs[1]
        cn = outs[2] if lstm else None

        if packed:
            if unsorted_idx is not None:
                hn = hn.index_select(1, unsorted_idx)
                cn = cn.index_select(1, unsorted_idx) if cn is not None else None
            out = PackedSequence(y, input.batch_sizes, sorted_idx, unsorted_idx)
        else:
            if batched and self.batch_first:
                y = y.transpose(0, 1)
            if not batched:
                y, hn = y.squeeze(1), hn.squeeze(1)
                cn = cn.squeeze(1) if cn is not None else None
            out = y
        return (out, (hn, cn)) if lstm else (out, hn)


class LSTM(_RNNBase):
    """``torch.nn.LSTM`` on pydnnl: ``LSTM(input_size, hidden_size, num_layers=1, bias=True,
    batch_first=False, dropout=0.0, bidirectional=False, proj_size=0, engine=None)``."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, engine=None, device=None,
                 dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, engine, device, dtype)


class GRU(_RNNBase):
    """``torch.nn.GRU`` on pydnnl (``lbr_gru``): ``GRU(input_size, hidden_size, num_layers=1,
    bias=True, batch_first=False, dropout=0.0, bidirectional=False, engine=None)``."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, engine=None, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, 0, engine, device, dtype)


class RNN(_RNNBase):
    """``torch.nn.RNN`` on pydnnl: ``RNN(input_size, hidden_size, num_layers=1,
    nonlinearity='tanh', bias=True, batch_first=False, dropout=0.0, bidirectional=False,
    engine=None)``."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, engine=None, device=None,
                 dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise invalid_arguments(f"RNN: nonlinearity must be 'tanh' or 'relu', got "
                                    f"{nonlinearity!r}")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size,
                         hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0,
                         engine, device, dtype)
        self.nonlinearity = nonlinearity
