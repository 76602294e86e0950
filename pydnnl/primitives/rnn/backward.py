"""RNN backward primitives: gradients of every cell kind, direction and stack (oneDNN's
``*_backward``), one pass computing diff_src and diff_weights from the forward's workspace."""
from __future__ import annotations

from ...constants import (
    ARG_DIFF_AUGRU_ATTENTION,
    ARG_DIFF_BIAS,
    ARG_DIFF_DST_ITER,
    ARG_DIFF_DST_ITER_C,
    ARG_DIFF_DST_LAYER,
    ARG_DIFF_SRC_ITER,
    ARG_DIFF_SRC_ITER_C,
    ARG_DIFF_SRC_LAYER,
    ARG_DIFF_WEIGHTS_ITER,
    ARG_DIFF_WEIGHTS_LAYER,
    ARG_DIFF_WEIGHTS_PEEPHOLE,
    ARG_DIFF_WEIGHTS_PROJECTION,
    ARG_WORKSPACE,
    prop_kind,
    rnn_direction,
    rnn_flags,
)
from ...error import invalid_arguments, unimplemented
from ...memory.data_types import data_type
from ...memory.desc import MemoryDesc
from ..base import ArgSpec, primitive
from ..signature import bind
from . import forward as fwd
from .extensions import as_extensions
from .plan_backward import BackwardPlanBuilder
from .problem import DESC_NAMES, check_shapes

DIFF_NAMES = ("diff_src_layer_desc", "diff_src_iter_desc", "diff_src_iter_c_desc",
              "diff_attention_desc", "diff_weights_layer_desc", "diff_weights_iter_desc",
              "diff_weights_peephole_desc", "diff_weights_projection_desc", "diff_bias_desc",
              "diff_dst_layer_desc", "diff_dst_iter_desc", "diff_dst_iter_c_desc")
# diff desc -> (argument, forward desc it mirrors, written by backward)
DIFF_ARGS = {
    "diff_src_layer_desc": (ARG_DIFF_SRC_LAYER, "src_layer_desc", True),
    "diff_src_iter_desc": (ARG_DIFF_SRC_ITER, "src_iter_desc", True),
    "diff_src_iter_c_desc": (ARG_DIFF_SRC_ITER_C, "src_iter_c_desc", True),
    "diff_attention_desc": (ARG_DIFF_AUGRU_ATTENTION, "attention_desc", True),
    "diff_weights_layer_desc": (ARG_DIFF_WEIGHTS_LAYER, "weights_layer_desc", True),
    "diff_weights_iter_desc": (ARG_DIFF_WEIGHTS_ITER, "weights_iter_desc", True),
    "diff_weights_peephole_desc": (ARG_DIFF_WEIGHTS_PEEPHOLE, "weights_peephole_desc", True),
    "diff_weights_projection_desc": (ARG_DIFF_WEIGHTS_PROJECTION, "weights_projection_desc",
                                     True),
    "diff_bias_desc": (ARG_DIFF_BIAS, "bias_desc", True),
    "diff_dst_layer_desc": (ARG_DIFF_DST_LAYER, "dst_layer_desc", False),
    "diff_dst_iter_desc": (ARG_DIFF_DST_ITER, "dst_iter_desc", False),
    "diff_dst_iter_c_desc": (ARG_DIFF_DST_ITER_C, "dst_iter_c_desc", False),
}
_REQUIRED_DIFF = ("diff_src_layer_desc", "diff_weights_layer_desc", "diff_weights_iter_desc",
                  "diff_bias_desc", "diff_dst_layer_desc")


def _present(md) -> bool:
    return md is not None and not md.is_zero()


def _diff_name(fwd_name: str) -> str:
    return "diff_" + fwd_name


class rnn_backward_pd_base(fwd.rnn_forward_pd_base):
    """Shared parsing and validation of the backward RNN pds."""

    _kind = "rnn_backward"
    _ARG_LABELS = fwd.RNN_ARG_LABELS
    _cell = ""
    _fwd_cls: type  # the forward primitive whose pd is hint_fwd_pd

    def __init__(self, *args, **kw):
        a = bind(self.signature, args, kw)
        descs = {n: a.get(n) for n in self.signature.form_names}
        hint = a["hint_fwd_pd"]
        alpha, beta = float(a["alpha"]), float(a["beta"])
        self._init_base(a["engine"], a["attr"])
        try:
            self._flags = rnn_flags(int(a["flags"]))
        except ValueError:
            raise invalid_arguments(f"{self._kind}: flags must be rnn_flags values, got "
                                    f"{a['flags']!r}") from None
        try:
            prop = prop_kind(a["prop_kind"])
        except ValueError:
            raise invalid_arguments(f"{self._kind}: unknown prop_kind {a['prop_kind']!r}") from None
        if prop != prop_kind.backward:
            raise invalid_arguments(f"{self._kind}: prop_kind must be backward, got {prop.name}")
        # -- the forward problem ------------------------------------------------------------------
        want = self._fwd_cls.__name__
        if hint is None:
            raise invalid_arguments(f"{self._kind}: hint_fwd_pd is required (the forward "
                                    f"{want}.primitive_desc of the training pass)")
        if not isinstance(hint, self._fwd_cls.primitive_desc):
            raise invalid_arguments(f"{self._kind}: hint_fwd_pd must be a {want}.primitive_desc, "
                                    f"got {type(hint).__qualname__}")
        if hint.get_prop_kind() != prop_kind.forward_training:
            raise invalid_arguments(
                f"{self._kind}: hint_fwd_pd was created for {hint.get_prop_kind().name}; backward "
                f"needs the forward_training primitive descriptor (its workspace holds what "
                f"backward reads)")
        fdescs = {k: v for k, v in descs.items() if k in DESC_NAMES}
        act = self._activation(a)
        self._spec = hint._spec
        ext = hint.shape.ext
        ext_given = a["extensions"]
        if ext_given is not None and as_extensions(ext_given, self._kind) != ext:
            raise invalid_arguments(
                f"{self._kind}: extensions {ext_given!r} differ from hint_fwd_pd's {ext!r}")
        self.shape = check_shapes(self._spec, prop_kind.forward_training, a["direction"], fdescs,
                                  activation=act, alpha=alpha, kind=self._kind, ext=ext)
        if self.shape != hint.shape:
            raise invalid_arguments(
                f"{self._kind}: the problem differs from hint_fwd_pd's "
                f"({_shape_str(self.shape)} vs {_shape_str(hint.shape)})")
        if self.shape.dt not in (data_type.f32, data_type.bf16):
            # oneDNN's data-type table lists f16 (and int8) for forward propagation only
            raise unimplemented(
                f"{self._kind}: backward is implemented for f32 and bf16 data, got "
                f"{self.shape.dt.name} src_layer_desc (oneDNN supports "
                f"{self.shape.dt.name} RNNs in forward propagation only)")
        self._hint = hint
        self._prop = prop
        self._direction = rnn_direction(a["direction"])
        self._alpha, self._beta = alpha, beta
        self.training = True
        # -- forward descs: as the hint resolved them where `any` was given ----------------------
        self._descs: dict[str, MemoryDesc] = {}
        for name in DESC_NAMES:
            md = fdescs.get(name)
            if not _present(md):
                self._descs[name] = MemoryDesc()
                continue
            self._descs[name] = hint._descs[name] if md.is_any() else md
            arg, _, out = fwd.ARGS[name]
            self._args[arg] = ArgSpec(self._descs[name], False, True)
        # -- diff descs ----------------------------------------------------------------------------
        for dname in DIFF_NAMES:
            arg, fname, written = DIFF_ARGS[dname]
            md = descs.get(dname)
            if not _present(md):
                if dname in _REQUIRED_DIFF and not _optional_diff(dname, self.shape, fdescs):
                    raise invalid_arguments(f"{self._kind}: {dname} is required, got {md!r}")
                if dname == "diff_weights_peephole_desc" and self.shape.peephole:
                    raise invalid_arguments(f"{self._kind}: the forward has peephole weights; "
                                            f"{dname} is required")
                if dname == "diff_weights_projection_desc" and self.shape.projection:
                    raise invalid_arguments(f"{self._kind}: the forward has projection weights; "
                                            f"{dname} is required")
                if dname == "diff_attention_desc" and self._spec.has_attention:
                    raise invalid_arguments(f"{self._kind}: {dname} is required for "
                                            f"{self._spec.name}")
                self._descs[dname] = MemoryDesc()
                continue
            f_md = self._descs.get(fname)
            if not _present(f_md):
                if fname in ("src_iter_desc", "src_iter_c_desc", "dst_iter_desc",
                             "dst_iter_c_desc"):
                    f_md = _state_desc(self.shape, fname)
                else:
                    raise invalid_arguments(f"{self._kind}: {dname} given but {fname} is "
                                            f"absent")
            if list(md.dims) != list(f_md.dims):
                raise invalid_arguments(
                    f"{self._kind}: {dname} dims {list(md.dims)} must equal {fname} dims "
                    f"{list(f_md.dims)}")
            if md.data_type not in (data_type.f32, data_type.undef):
                raise unimplemented(f"{self._kind}: {dname} must be f32, got {md.data_type.name}")
            resolved = fwd.canonical_desc(fname, md) if md.is_any() else md
            self._descs[dname] = resolved
            self._args[arg] = ArgSpec(resolved, written, True)
        self._args[ARG_WORKSPACE] = ArgSpec(hint.workspace_desc(), False, True)
        self.ws_regions = hint.ws_regions
        from .plan_backward import grid_backward, scratch_regions

        self.scratch = scratch_regions(self)
        self._finish_scratchpad(self.scratch.nbytes())
        self._impl = ("loopy:gemm+grid" if grid_backward(self.get_engine(), self.shape) is not None
                      else "loopy:gemm+cell")
        s = self.shape
        self._info = (f"alg:{self._spec.name} direction:{self._direction.name} prop:backward "
                      f"l{s.L}t{s.T}mb{s.N}sic{s.SIC}slc{s.SLC}dhc{s.DHC}dic{s.DIC}"
                      + (" flags:overwrite" if self._flags & rnn_flags.diff_weights_overwrite
                         else ""))

    def get_flags(self) -> rnn_flags:
        return self._flags


fwd.add_desc_queries(rnn_backward_pd_base, DESC_NAMES + DIFF_NAMES)
rnn_backward_pd_base.diff_augru_attention_desc = rnn_backward_pd_base.diff_attention_desc


def _optional_diff(dname: str, shape, fdescs: dict) -> bool:
    """Required diff descs the extensions make optional (no bias, no layer-0 input matrix)."""
    if dname == "diff_bias_desc":
        return shape.ext.no_bias
    if dname == "diff_weights_layer_desc":
        return not _present(fdescs.get("weights_layer_desc"))
    return False


def _state_desc(shape, fname: str) -> MemoryDesc:
    width = {"src_iter_desc": shape.SIC, "dst_iter_desc": shape.DIC}.get(fname, shape.DHC)
    return MemoryDesc([shape.L, shape.D, shape.N, width], data_type.f32, "ldnc")


def _shape_str(s) -> str:
    return (f"{s.cell} {s.direction.name} {s.dt.name} l{s.L}t{s.T}mb{s.N}sic{s.SIC}slc{s.SLC}"
            f"dhc{s.DHC}dic{s.DIC}")


class rnn_backward_base(primitive):
    """Shared plan building and execution of the backward RNN primitives."""

    def _create(self) -> None:
        self._plan = BackwardPlanBuilder(self._pd)

    def _execute(self, s, args) -> None:
        self._plan.execute(s, args)


def backward_forms(forms: tuple[tuple[str, ...], ...]) -> tuple[tuple[str, ...], ...]:
    """oneDNN's order: the forward descs, then the diff of each, in the same order."""
    return tuple(f + tuple(_diff_name(n) for n in f) for f in forms)


def _signature(kind: str, forms, activation: bool = False):
    return fwd.rnn_signature(kind, backward_forms(forms), activation=activation, backward=True)


class vanilla_rnn_backward(rnn_backward_base):
    """Vanilla RNN backward."""

    class primitive_desc(rnn_backward_pd_base):
        """``vanilla_rnn_backward.primitive_desc(engine, prop_kind, activation, direction,
        src_layer, src_iter, weights_layer, weights_iter, bias, dst_layer, dst_iter,
        diff_src_layer, diff_src_iter, diff_weights_layer, diff_weights_iter, diff_bias,
        diff_dst_layer, diff_dst_iter, hint_fwd_pd, attr=None, alpha=0, beta=0)``"""

        _kind, _cell = "vanilla_rnn_backward", "vanilla_rnn"
        _fwd_cls = fwd.vanilla_rnn_forward
        signature = _signature(_kind, (fwd.RNN_FORM,), activation=True)


class lstm_backward(rnn_backward_base):
    """LSTM backward (peephole and projection variants as in lstm_forward)."""

    class primitive_desc(rnn_backward_pd_base):
        """``lstm_backward.primitive_desc(engine, prop_kind, direction, <the forward descs>,
        <their diff descs in the same order>, hint_fwd_pd, attr=None)``"""

        _kind, _cell = "lstm_backward", "vanilla_lstm"
        _fwd_cls = fwd.lstm_forward
        signature = _signature(_kind, fwd.LSTM_FORMS)


class gru_backward(rnn_backward_base):
    """GRU backward."""

    class primitive_desc(rnn_backward_pd_base):
        """``gru_backward.primitive_desc(engine, prop_kind, direction, src_layer, src_iter,
        weights_layer, weights_iter, bias, dst_layer, dst_iter, diff_src_layer, diff_src_iter,
        diff_weights_layer, diff_weights_iter, diff_bias, diff_dst_layer, diff_dst_iter,
        hint_fwd_pd, attr=None)``"""

        _kind, _cell = "gru_backward", "vanilla_gru"
        _fwd_cls = fwd.gru_forward
        signature = _signature(_kind, (fwd.RNN_FORM,))


class lbr_gru_backward(rnn_backward_base):
    """Linear-before-reset GRU backward."""

    class primitive_desc(rnn_backward_pd_base):
        """As gru_backward, for lbr_gru."""

        _kind, _cell = "lbr_gru_backward", "lbr_gru"
        _fwd_cls = fwd.lbr_gru_forward
        signature = _signature(_kind, (fwd.RNN_FORM,))


class augru_backward(rnn_backward_base):
    """AUGRU backward."""

    class primitive_desc(rnn_backward_pd_base):
        """As gru_backward with attention and diff_attention after the iter descs."""

        _kind, _cell = "augru_backward", "vanilla_augru"
        _fwd_cls = fwd.augru_forward
        signature = _signature(_kind, (fwd.AUGRU_FORM,))


class lbr_augru_backward(rnn_backward_base):
    """Linear-before-reset AUGRU backward."""

    class primitive_desc(rnn_backward_pd_base):
        """As augru_backward, for lbr_augru."""

        _kind, _cell = "lbr_augru_backward", "lbr_augru"
        _fwd_cls = fwd.lbr_augru_forward
        signature = _signature(_kind, (fwd.AUGRU_FORM,))


__all__ = ["vanilla_rnn_backward", "lstm_backward", "gru_backward", "lbr_gru_backward",
           "augru_backward", "lbr_augru_backward", "backward_forms"]
