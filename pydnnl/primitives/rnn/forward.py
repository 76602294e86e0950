"""RNN forward primitives: vanilla RNN, LSTM (peephole, projection), GRU, LBR-GRU, AUGRU,
LBR-AUGRU, every direction, stacks of layers, inference and training."""
from __future__ import annotations

from ...attr import primitive_attr
from ...cells import get_cell
from ...constants import (ARG_AUGRU_ATTENTION, ARG_BIAS, ARG_DST_ITER, ARG_DST_ITER_C,
                          ARG_DST_LAYER, ARG_SRC_ITER, ARG_SRC_ITER_C, ARG_SRC_LAYER,
                          ARG_WEIGHTS_ITER, ARG_WEIGHTS_LAYER, ARG_WEIGHTS_PEEPHOLE,
                          ARG_WEIGHTS_PROJECTION, ARG_WORKSPACE, algorithm, prop_kind,
                          rnn_direction)
from ...engine import engine as _engine
from ...error import invalid_arguments
from ...memory.data_types import data_type
from ...memory.desc import MemoryDesc
from ..base import ArgSpec, primitive, primitive_desc_base
from . import layout
from .extensions import as_extensions
from .problem import DESC_NAMES, check_shapes

# desc name -> (execution argument, canonical tag, is output)
ARGS = {
    "src_layer_desc": (ARG_SRC_LAYER, "tnc", False),
    "src_iter_desc": (ARG_SRC_ITER, "ldnc", False),
    "src_iter_c_desc": (ARG_SRC_ITER_C, "ldnc", False),
    "attention_desc": (ARG_AUGRU_ATTENTION, "tnc", False),
    "weights_layer_desc": (ARG_WEIGHTS_LAYER, "ldigo", False),
    "weights_iter_desc": (ARG_WEIGHTS_ITER, "ldigo", False),
    "weights_peephole_desc": (ARG_WEIGHTS_PEEPHOLE, "ldgo", False),
    "weights_projection_desc": (ARG_WEIGHTS_PROJECTION, "ldio", False),
    "bias_desc": (ARG_BIAS, "ldgo", False),
    "dst_layer_desc": (ARG_DST_LAYER, "tnc", True),
    "dst_iter_desc": (ARG_DST_ITER, "ldnc", True),
    "dst_iter_c_desc": (ARG_DST_ITER_C, "ldnc", True),
}

RNN_ARG_LABELS = {
    1: "ARG_SRC_LAYER", 2: "ARG_SRC_ITER", 3: "ARG_SRC_ITER_C", 4: "ARG_AUGRU_ATTENTION",
    17: "ARG_DST_LAYER", 18: "ARG_DST_ITER", 19: "ARG_DST_ITER_C", 33: "ARG_WEIGHTS_LAYER",
    34: "ARG_WEIGHTS_ITER", 35: "ARG_WEIGHTS_PEEPHOLE", 36: "ARG_WEIGHTS_PROJECTION",
    41: "ARG_BIAS", 64: "ARG_WORKSPACE", 80: "ARG_SCRATCHPAD",
    129: "ARG_DIFF_SRC_LAYER", 130: "ARG_DIFF_SRC_ITER", 131: "ARG_DIFF_SRC_ITER_C",
    132: "ARG_DIFF_AUGRU_ATTENTION", 145: "ARG_DIFF_DST_LAYER", 146: "ARG_DIFF_DST_ITER",
    147: "ARG_DIFF_DST_ITER_C", 161: "ARG_DIFF_WEIGHTS_LAYER", 162: "ARG_DIFF_WEIGHTS_ITER",
    163: "ARG_DIFF_WEIGHTS_PEEPHOLE", 164: "ARG_DIFF_WEIGHTS_PROJECTION", 169: "ARG_DIFF_BIAS",
}

_ACTIVATIONS = {algorithm.eltwise_relu: "relu", algorithm.eltwise_tanh: "tanh",
                algorithm.eltwise_logistic: "logistic"}


def canonical_desc(name: str, md: MemoryDesc) -> MemoryDesc:
    """The plain layout pydnnl's RNN kernels read and write for this tensor (md's data type)."""
    tag = ARGS[name][1]
    if name in ("attention_desc", "src_layer_desc", "dst_layer_desc") and len(md.dims) == 2:
        tag = "ab"  # AUGRU attention [T, N]; packed sequences [rows, C]
    return MemoryDesc(md.dims, md.data_type if md.data_type != data_type.undef else data_type.f32, tag)


def kernel_desc(name: str, md: MemoryDesc) -> MemoryDesc:
    """What the kernels read directly: the canonical layout in f32 (f16/bf16 are converted)."""
    return canonical_desc(name, md).with_data_type(data_type.f32)


class rnn_forward_pd_base(primitive_desc_base):
    """Shared parsing, validation, layout negotiation and queries of the forward RNN pds."""

    _kind = "rnn_forward"
    _ARG_LABELS = RNN_ARG_LABELS
    _cell = ""
    #: positional parameter lists accepted after (engine, prop_kind, [activation,] direction)
    _signatures: tuple[tuple[str, ...], ...] = ()
    _has_activation = False

    def __init__(self, *args, **kw):
        names = ["engine", "prop_kind"] + (["activation"] if self._has_activation else []) + ["direction"]
        head = dict(zip(names, args))
        rest = list(args[len(names):])
        aliases = {"aengine": "engine", "aprop_kind": "prop_kind", "cell_kind": "activation"}
        kw = {aliases.get(k, k): v for k, v in kw.items()}
        for k in names:
            if k in kw:
                if k in head:
                    raise invalid_arguments(f"{self._kind}: {k} given twice (positionally and by keyword)")
                head[k] = kw.pop(k)
        missing = [k for k in names if k not in head]
        if missing:
            raise invalid_arguments(f"{self._kind}: missing {', '.join(missing)}")
        descs, extra = self._bind_descs(rest, kw)
        attr = extra.pop("attr", None)
        alpha = float(extra.pop("alpha", 0.0))
        beta = float(extra.pop("beta", 0.0))
        extra.pop("allow_empty", None)
        ext = as_extensions(extra.pop("extensions", None), self._kind)
        if extra:
            raise invalid_arguments(f"{self._kind}: unknown keyword argument(s) {', '.join(extra)}")
        self._init_base(head["engine"], attr)
        self._spec = get_cell(self._cell)
        act = "tanh"
        if self._has_activation:
            try:
                alg = algorithm(head["activation"])
            except ValueError:
                alg = None
            if alg not in _ACTIVATIONS:
                raise invalid_arguments(
                    f"{self._kind}: activation must be algorithm.eltwise_relu, eltwise_tanh or "
                    f"eltwise_logistic, got {head['activation']!r}")
            act = _ACTIVATIONS[alg]
            self._activation_alg = alg
        self._alpha, self._beta = alpha, beta
        self.shape = check_shapes(self._spec, head["prop_kind"], head["direction"], descs,
                                  activation=act, alpha=alpha, kind=self._kind, ext=ext)
        self._prop = prop_kind(head["prop_kind"])
        self._direction = rnn_direction(head["direction"])
        self._user_descs = dict(descs)
        self._descs: dict[str, MemoryDesc] = {}
        for name in DESC_NAMES:
            md = descs.get(name)
            if md is None or md.is_zero():
                self._descs[name] = MemoryDesc()
                continue
            self._descs[name] = canonical_desc(name, md) if md.is_any() else md
            arg, _, out = ARGS[name]
            self._args[arg] = ArgSpec(self._descs[name], out, True)
        self.training = self._prop == prop_kind.forward_training
        self.ws_regions = layout.state_regions(self.shape, self.training)
        if self.training:
            self._args[ARG_WORKSPACE] = ArgSpec(layout.workspace_md(self.ws_regions.nbytes()), True, True)
        from .plan_forward import scratch_regions

        self.scratch = scratch_regions(self)
        self._finish_scratchpad(self.scratch.nbytes())
        self._impl = "loopy:gemm+cell"
        s = self.shape
        self._info = (f"alg:{self._spec.name} direction:{self._direction.name} prop:{self._prop.name} "
                      f"l{s.L}t{s.T}mb{s.N}sic{s.SIC}slc{s.SLC}dhc{s.DHC}dic{s.DIC}"
                      + (f" ext:{ext.describe().replace(' ', ',')}" if ext.any else ""))

    def get_extensions(self):
        """The :class:`pydnnl.rnn_extensions` this primitive was created with."""
        return self.shape.ext

    @classmethod
    def _bind_descs(cls, rest: list, kw: dict) -> tuple[dict, dict]:
        """Match positional descs to one of the class's signatures; merge keyword descs."""
        extra = {}
        rest = list(rest)
        if rest and isinstance(rest[-1], primitive_attr):
            extra["attr"] = rest.pop()
        lens = {len(c): c for c in reversed(cls._signatures)}
        if rest and len(rest) not in lens and len(rest) - 1 in lens and rest[-1] is None:
            extra["attr"] = rest.pop()  # attr=None passed positionally
        if rest and len(rest) not in lens:
            raise invalid_arguments(
                f"{cls._kind}: expected {' or '.join(map(str, sorted(lens)))} memory descs after "
                f"the direction, got {len(rest)}")
        descs = dict(zip(lens[len(rest)], rest)) if rest else {}
        allowed = set(n for c in cls._signatures for n in c)
        for k, v in kw.items():
            if k in DESC_NAMES:
                if k not in allowed:
                    raise invalid_arguments(f"{cls._kind}: takes no {k}")
                if k in descs:
                    raise invalid_arguments(f"{cls._kind}: {k} given twice (positionally and by keyword)")
                descs[k] = v
            else:
                extra[k] = v
        if extra.get("attr") is not None and not isinstance(extra["attr"], primitive_attr):
            raise invalid_arguments(f"{cls._kind}: attr must be a primitive_attr, got {type(extra['attr']).__name__}")
        return descs, extra

    # -- queries: <name>() for every forward desc name, set below ------------------------------
    def _q(self, name: str) -> MemoryDesc:
        return self._descs.get(name, MemoryDesc())

    def get_prop_kind(self) -> prop_kind:
        return self._prop

    def get_cell_kind(self) -> algorithm:
        return algorithm(self._spec.alg_kind)

    def get_direction(self) -> rnn_direction:
        return self._direction

    def get_activation_kind(self) -> algorithm:
        return getattr(self, "_activation_alg", algorithm.undef)

    def get_alpha(self) -> float:
        return self._alpha

    def get_beta(self) -> float:
        return self._beta


def add_desc_queries(cls, names) -> None:
    """``cls.<name>()`` for each desc name (``src_layer_desc()``, ...), as oneDNN's pds have."""
    for n in names:
        setattr(cls, n, (lambda name: lambda self: self._q(name))(n))
    cls.augru_attention_desc = cls.attention_desc


add_desc_queries(rnn_forward_pd_base, DESC_NAMES)


class rnn_forward_base(primitive):
    """Shared plan building and execution of the forward RNN primitives."""

    def _create(self) -> None:
        from .plan_forward import ForwardPlan

        self._plan = ForwardPlan(self._pd)

    def _execute(self, s, args) -> None:
        self._plan.execute(s, args)

    @property
    def dropout_offset(self) -> int:
        """How many executions drew dropout masks so far: execution k draws layer l's
        direction d mask from Philox counter block ``k * (L - 1) * D + l * D + d`` (see
        :class:`pydnnl.rnn_extensions`). Set it to replay or skip ahead."""
        return self._plan.executions

    @dropout_offset.setter
    def dropout_offset(self, value: int) -> None:
        if not isinstance(value, int) or value < 0:
            raise invalid_arguments(f"{type(self).__name__}: dropout_offset must be a "
                                    f"non-negative int, got {value!r}")
        self._plan.executions = value


def make_classes(cls_name: str, pd_base, prim_base, doc: str, **pd_attrs):
    """The ``<name>`` primitive class and its nested ``<name>.primitive_desc`` class."""
    pd_cls = type("primitive_desc", (pd_base,),
                  {"_kind": cls_name, "__doc__": doc, "__qualname__": f"{cls_name}.primitive_desc",
                   **pd_attrs})
    prim_cls = type(cls_name, (prim_base,), {"primitive_desc": pd_cls, "__doc__": doc})

    def __init__(self, pd):
        if not isinstance(pd, pd_cls):
            raise invalid_arguments(f"{cls_name}: expected a {cls_name}.primitive_desc, got {type(pd).__name__}")
        prim_base.__init__(self, pd)

    prim_cls.__init__ = __init__
    return prim_cls


def _make(cls_name: str, cell: str, signatures, has_activation: bool = False, doc: str = ""):
    return make_classes(cls_name, rnn_forward_pd_base, rnn_forward_base, doc, _cell=cell,
                        _signatures=signatures, _has_activation=has_activation)


_STATE = ("src_layer_desc", "src_iter_desc")
_OUT = ("dst_layer_desc", "dst_iter_desc")

vanilla_rnn_forward = _make(
    "vanilla_rnn_forward", "vanilla_rnn",
    (_STATE + ("weights_layer_desc", "weights_iter_desc", "bias_desc") + _OUT,),
    has_activation=True,
    doc="``vanilla_rnn_forward.primitive_desc(engine, prop_kind, activation, direction, "
        "src_layer, src_iter, weights_layer, weights_iter, bias, dst_layer, dst_iter, attr=None, "
        "alpha=0, beta=0)``")

lstm_forward = _make(
    "lstm_forward", "vanilla_lstm",
    (("src_layer_desc", "src_iter_desc", "src_iter_c_desc", "weights_layer_desc",
      "weights_iter_desc", "bias_desc", "dst_layer_desc", "dst_iter_desc", "dst_iter_c_desc"),
     ("src_layer_desc", "src_iter_desc", "src_iter_c_desc", "weights_layer_desc",
      "weights_iter_desc", "weights_peephole_desc", "bias_desc", "dst_layer_desc",
      "dst_iter_desc", "dst_iter_c_desc"),
     ("src_layer_desc", "src_iter_desc", "src_iter_c_desc", "weights_layer_desc",
      "weights_iter_desc", "weights_peephole_desc", "weights_projection_desc", "bias_desc",
      "dst_layer_desc", "dst_iter_desc", "dst_iter_c_desc")),
    doc="``lstm_forward.primitive_desc(engine, prop_kind, direction, src_layer, src_iter, "
        "src_iter_c, weights_layer, weights_iter, [weights_peephole, [weights_projection,]] bias, "
        "dst_layer, dst_iter, dst_iter_c, attr=None)``")

_GRU_SIG = (_STATE + ("weights_layer_desc", "weights_iter_desc", "bias_desc") + _OUT,)
gru_forward = _make("gru_forward", "vanilla_gru", _GRU_SIG,
                    doc="``gru_forward.primitive_desc(engine, prop_kind, direction, src_layer, "
                        "src_iter, weights_layer, weights_iter, bias, dst_layer, dst_iter, attr=None)``")
lbr_gru_forward = _make("lbr_gru_forward", "lbr_gru", _GRU_SIG,
                        doc="``lbr_gru_forward.primitive_desc(...)``: as gru_forward, bias [L, D, 4, DHC]")
_AUGRU_SIG = (("src_layer_desc", "src_iter_desc", "attention_desc", "weights_layer_desc",
               "weights_iter_desc", "bias_desc") + _OUT,)
augru_forward = _make("augru_forward", "vanilla_augru", _AUGRU_SIG,
                      doc="``augru_forward.primitive_desc(engine, prop_kind, direction, src_layer, "
                          "src_iter, attention, weights_layer, weights_iter, bias, dst_layer, "
                          "dst_iter, attr=None)``")
lbr_augru_forward = _make("lbr_augru_forward", "lbr_augru", _AUGRU_SIG,
                          doc="``lbr_augru_forward.primitive_desc(...)``: as augru_forward, bias [L, D, 4, DHC]")

__all__ = ["vanilla_rnn_forward", "lstm_forward", "gru_forward", "lbr_gru_forward",
           "augru_forward", "lbr_augru_forward", "rnn_forward_pd_base", "make_classes",
           "add_desc_queries"]
del _engine
