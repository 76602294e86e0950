"""RNN forward primitives: vanilla RNN, LSTM (peephole, projection), GRU, LBR-GRU, AUGRU,
LBR-AUGRU, every direction, stacks of layers, inference and training."""
from __future__ import annotations

from ...cells import get_cell
from ...constants import (
    ARG_WORKSPACE,
    algorithm,
    prop_kind,
    rnn_direction,
    rnn_flags,
)
from ...error import invalid_arguments, unimplemented
from ...memory.data_types import data_type
from ...memory.desc import MemoryDesc
from ..base import ArgSpec, primitive, primitive_desc_base
from ..signature import NUMBER, Signature, bind
from . import layout
from .extensions import as_extensions
from .layout import ARGS, canonical_desc, kernel_desc  # noqa: F401  (re-exported)
from .plan_forward import ForwardPlanBuilder
from .problem import DESC_NAMES, check_shapes

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


# oneDNN's positional desc orders (the forms of every forward pd; backward appends the diffs)
RNN_FORM = ("src_layer_desc", "src_iter_desc", "weights_layer_desc", "weights_iter_desc",
            "bias_desc", "dst_layer_desc", "dst_iter_desc")
AUGRU_FORM = ("src_layer_desc", "src_iter_desc", "attention_desc", "weights_layer_desc",
              "weights_iter_desc", "bias_desc", "dst_layer_desc", "dst_iter_desc")
# longest first: a trailing None is read as a desc (dst_iter_c_desc), not as attr
LSTM_FORMS = (
    ("src_layer_desc", "src_iter_desc", "src_iter_c_desc", "weights_layer_desc",
     "weights_iter_desc", "weights_peephole_desc", "weights_projection_desc", "bias_desc",
     "dst_layer_desc", "dst_iter_desc", "dst_iter_c_desc"),
    ("src_layer_desc", "src_iter_desc", "src_iter_c_desc", "weights_layer_desc",
     "weights_iter_desc", "weights_peephole_desc", "bias_desc", "dst_layer_desc",
     "dst_iter_desc", "dst_iter_c_desc"),
    ("src_layer_desc", "src_iter_desc", "src_iter_c_desc", "weights_layer_desc",
     "weights_iter_desc", "bias_desc", "dst_layer_desc", "dst_iter_desc", "dst_iter_c_desc"),
)


def rnn_signature(kind: str, forms: tuple[tuple[str, ...], ...], *, activation: bool = False,
                  backward: bool = False) -> Signature:
    """(engine, prop_kind, [activation,] direction, <descs of a form>, [hint_fwd_pd,] attr...):
    every desc may be left out of a keyword call (None: absent)."""
    names = tuple(dict.fromkeys(n for f in forms for n in f))
    return Signature(
        f"{kind}.primitive_desc",
        head=("engine", "prop_kind") + (("activation",) if activation else ()) + ("direction",),
        forms=forms,
        tail=("hint_fwd_pd", "attr", "alpha", "beta") if backward else ("attr",),
        keyword_only=("extensions", "allow_empty")
        + (("flags",) if backward else ("alpha", "beta")),
        optional=frozenset(names),
        aliases={"aengine": "engine", "aprop_kind": "prop_kind", "cell_kind": "activation"},
        kinds={"alpha": NUMBER, "beta": NUMBER},
        defaults={"alpha": 0.0, "beta": 0.0, "flags": rnn_flags.undef})


class rnn_forward_pd_base(primitive_desc_base):
    """Shared parsing, validation, layout negotiation and queries of the forward RNN pds."""

    _kind = "rnn_forward"
    _ARG_LABELS = RNN_ARG_LABELS
    # the plans read src/iter states and diff_dst across time steps while writing the outputs
    _IN_PLACE: frozenset = frozenset()
    _cell = ""
    signature: Signature

    def __init__(self, *args, **kw):
        a = bind(self.signature, args, kw)
        descs = {n: a.get(n) for n in self.signature.form_names}
        alpha, beta = float(a["alpha"]), float(a["beta"])
        ext = as_extensions(a["extensions"], self._kind)
        self._init_base(a["engine"], a["attr"])
        self._spec = get_cell(self._cell)
        act = self._activation(a)
        self._alpha, self._beta = alpha, beta
        self.shape = check_shapes(self._spec, a["prop_kind"], a["direction"], descs,
                                  activation=act, alpha=alpha, kind=self._kind, ext=ext)
        self._prop = prop_kind(a["prop_kind"])
        self._direction = rnn_direction(a["direction"])
        self.int8 = None
        if self.shape.int8 is not None:
            from .int8 import int8_params

            self.int8 = int8_params(self.shape, self._attr, self._kind)
        elif self._attr.has_rnn_qparams():
            raise unimplemented(
                f"{self._kind}: RNN quantization parameters (set_rnn_*_qparams) apply to int8 "
                f"(u8/s8 src_layer) RNNs only, got {self.shape.dt.name}")
        self._user_descs = dict(descs)
        self._descs: dict[str, MemoryDesc] = {}
        self.training = self._prop == prop_kind.forward_training
        from .plan_forward import panel_desc, weights_panels

        # inference weights left to the primitive: the GEMM's panels where its kernels read
        # them (no packing per execution), else the canonical layout
        self._weights_panels = weights_panels(self.get_engine(), self.shape, self.training)
        for name in DESC_NAMES:
            md = descs.get(name)
            if md is None or md.is_zero():
                self._descs[name] = MemoryDesc()
                continue
            if (md.is_any() and name in self._weights_panels
                    and md.data_type == data_type.f32):
                self._descs[name] = panel_desc(md.dims, self._weights_panels[name][0])
            else:
                self._descs[name] = canonical_desc(name, md) if md.is_any() else md
            arg, _, out = ARGS[name]
            self._args[arg] = ArgSpec(self._descs[name], out, True)
        self.ws_regions = layout.state_regions(self.shape, self.training)
        if self.training:
            ws = layout.workspace_md(self.ws_regions.nbytes())
            self._args[ARG_WORKSPACE] = ArgSpec(ws, True, True)
        from .plan_forward import scratch_regions

        self.scratch = scratch_regions(self)
        self._finish_scratchpad(self.scratch.nbytes())
        from .plan_forward import recurrence_kind

        self._impl = f"loopy:gemm+{recurrence_kind(self.get_engine(), self.shape, self.training)}"
        if self.int8 is not None:
            self._impl += " int8 emulated: f32 accumulation"
        elif self.shape.dt != data_type.f32:
            from .plan_common import role_gemm
            from .plan_forward import weight_gemms

            roles = weight_gemms(self.shape)
            g = role_gemm(self.get_engine(), self.shape, "layer", roles["layer"][0]) \
                if "layer" in roles else None
            tc = g is not None and g.nv_tile is not None and g.nv_tile.mma is not None
            self._impl += (f" {self.shape.dt.name}: layer GEMM on {g.nv_tile.mma} tensor cores, "
                           "rest in f32" if tc else f" {self.shape.dt.name}: computed in f32")
        s = self.shape
        self._info = (f"alg:{self._spec.name} direction:{self._direction.name} "
                      f"prop:{self._prop.name} "
                      f"l{s.L}t{s.T}mb{s.N}sic{s.SIC}slc{s.SLC}dhc{s.DHC}dic{s.DIC}"
                      + (f" ext:{ext.describe().replace(' ', ',')}" if ext.any else "")
                      + (f" {self.int8.describe()}" if self.int8 is not None else ""))

    def _activation(self, a: dict) -> str:
        """The vanilla RNN's activation (set as ``_activation_alg``); tanh for the others."""
        if "activation" not in a:
            return "tanh"
        try:
            alg = algorithm(a["activation"])
        except ValueError:
            alg = None
        if alg not in _ACTIVATIONS:
            raise invalid_arguments(
                f"{self._kind}: activation must be algorithm.eltwise_relu, eltwise_tanh or "
                f"eltwise_logistic, got {a['activation']!r}")
        self._activation_alg = alg
        return _ACTIVATIONS[alg]

    def get_extensions(self):
        """The :class:`pydnnl.rnn_extensions` this primitive was created with."""
        return self.shape.ext

    # -- queries: <name>() for every forward desc name, set below ------------------------------
    def _query_family(self, what):
        """oneDNN's rnn_pd numbering: weights_md (and diff_weights_md) count the peephole and
        projection only when present, so the bias follows the last weights the cell has."""
        fam = super()._query_family(what)
        if fam is not None and len(fam) == 5:
            return fam[:2] + tuple(a for a in fam[2:4] if a in self._args) + fam[4:]
        return fam

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
        self._plan = ForwardPlanBuilder(self._pd)

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


class vanilla_rnn_forward(rnn_forward_base):
    """Vanilla RNN forward (relu, tanh or logistic activation)."""

    class primitive_desc(rnn_forward_pd_base):
        """``vanilla_rnn_forward.primitive_desc(engine, prop_kind, activation, direction,
        src_layer, src_iter, weights_layer, weights_iter, bias, dst_layer, dst_iter, attr=None,
        alpha=0, beta=0)``"""

        _kind, _cell = "vanilla_rnn_forward", "vanilla_rnn"
        signature = rnn_signature(_kind, (RNN_FORM,), activation=True)


class lstm_forward(rnn_forward_base):
    """LSTM forward, with optional peephole and projection weights."""

    class primitive_desc(rnn_forward_pd_base):
        """``lstm_forward.primitive_desc(engine, prop_kind, direction, src_layer, src_iter,
        src_iter_c, weights_layer, weights_iter, [weights_peephole, [weights_projection,]] bias,
        dst_layer, dst_iter, dst_iter_c, attr=None)``"""

        _kind, _cell = "lstm_forward", "vanilla_lstm"
        signature = rnn_signature(_kind, LSTM_FORMS)


class gru_forward(rnn_forward_base):
    """GRU forward."""

    class primitive_desc(rnn_forward_pd_base):
        """``gru_forward.primitive_desc(engine, prop_kind, direction, src_layer, src_iter,
        weights_layer, weights_iter, bias, dst_layer, dst_iter, attr=None)``"""

        _kind, _cell = "gru_forward", "vanilla_gru"
        signature = rnn_signature(_kind, (RNN_FORM,))


class lbr_gru_forward(rnn_forward_base):
    """Linear-before-reset GRU forward."""

    class primitive_desc(rnn_forward_pd_base):
        """``lbr_gru_forward.primitive_desc(...)``: as gru_forward, bias [L, D, 4, DHC]"""

        _kind, _cell = "lbr_gru_forward", "lbr_gru"
        signature = rnn_signature(_kind, (RNN_FORM,))


class augru_forward(rnn_forward_base):
    """AUGRU (GRU with attention update gate) forward."""

    class primitive_desc(rnn_forward_pd_base):
        """``augru_forward.primitive_desc(engine, prop_kind, direction, src_layer, src_iter,
        attention, weights_layer, weights_iter, bias, dst_layer, dst_iter, attr=None)``"""

        _kind, _cell = "augru_forward", "vanilla_augru"
        signature = rnn_signature(_kind, (AUGRU_FORM,))


class lbr_augru_forward(rnn_forward_base):
    """Linear-before-reset AUGRU forward."""

    class primitive_desc(rnn_forward_pd_base):
        """``lbr_augru_forward.primitive_desc(...)``: as augru_forward, bias [L, D, 4, DHC]"""

        _kind, _cell = "lbr_augru_forward", "lbr_augru"
        signature = rnn_signature(_kind, (AUGRU_FORM,))


__all__ = ["vanilla_rnn_forward", "lstm_forward", "gru_forward", "lbr_gru_forward",
           "augru_forward", "lbr_augru_forward", "rnn_forward_pd_base", "rnn_forward_base",
           "rnn_signature", "add_desc_queries"]
