"""RNN backward primitives: gradients of every cell kind, direction and stack (oneDNN's
``*_backward``), one pass computing diff_src and diff_weights from the forward's workspace."""
from __future__ import annotations

from ...constants import (ARG_DIFF_AUGRU_ATTENTION, ARG_DIFF_BIAS,
                          ARG_DIFF_DST_ITER, ARG_DIFF_DST_ITER_C, ARG_DIFF_DST_LAYER,
                          ARG_DIFF_SRC_ITER, ARG_DIFF_SRC_ITER_C, ARG_DIFF_SRC_LAYER,
                          ARG_DIFF_WEIGHTS_ITER, ARG_DIFF_WEIGHTS_LAYER,
                          ARG_DIFF_WEIGHTS_PEEPHOLE, ARG_DIFF_WEIGHTS_PROJECTION, ARG_WORKSPACE,
                          algorithm, prop_kind, rnn_direction, rnn_flags)
from ...error import invalid_arguments, unimplemented
from ...memory.data_types import data_type
from ...memory.desc import MemoryDesc
from ..base import ArgSpec, primitive, primitive_desc_base
from . import forward as fwd
from .extensions import as_extensions
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
    "diff_weights_projection_desc": (ARG_DIFF_WEIGHTS_PROJECTION, "weights_projection_desc", True),
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
    _signatures: tuple[tuple[str, ...], ...] = ()
    _has_activation = False
    _fwd_cls = None

    def __init__(self, *args, **kw):
        names = ["engine", "prop_kind"] + (["activation"] if self._has_activation else []) + ["direction"]
        aliases = {"aengine": "engine", "aprop_kind": "prop_kind"}
        kw = {aliases.get(k, k): v for k, v in kw.items()}
        head = dict(zip(names, args))
        rest = list(args[len(names):])
        for k in names:
            if k in kw:
                if k in head:
                    raise invalid_arguments(f"{self._kind}: {k} given twice (positionally and by keyword)")
                head[k] = kw.pop(k)
        missing = [k for k in names if k not in head]
        if missing:
            raise invalid_arguments(f"{self._kind}: missing {', '.join(missing)}")
        # positional descs end where hint_fwd_pd (a primitive descriptor) begins
        lens = {len(sig): sig for sig in self._signatures}
        cut = next((i for i, v in enumerate(rest) if isinstance(v, primitive_desc_base)), len(rest))
        if rest and cut not in lens:
            # hint_fwd_pd passed positionally as None (then attr, alpha, beta): the descs end
            # where that None stands, so the error below names the missing hint
            for k in range(1, 5):
                if (cut - k in lens and rest[cut - k] is None
                        and not any(isinstance(v, MemoryDesc) for v in rest[cut - k + 1:cut])):
                    cut -= k
                    break
        if rest and cut not in lens:
            raise invalid_arguments(
                f"{self._kind}: expected {' or '.join(map(str, sorted(lens)))} memory descs after "
                f"the direction, got {cut}")
        descs = dict(zip(lens[cut], rest[:cut])) if cut else {}
        tail = rest[cut:]
        for k, v in zip(("hint_fwd_pd", "attr", "alpha", "beta"), tail):
            if k in kw:
                raise invalid_arguments(f"{self._kind}: {k} given twice (positionally and by keyword)")
            kw[k] = v
        allowed = set(n for s in self._signatures for n in s)
        for k in list(kw):
            if k in DESC_NAMES or k in DIFF_NAMES:
                if k not in allowed:
                    raise invalid_arguments(f"{self._kind}: takes no {k}")
                if k in descs:
                    raise invalid_arguments(f"{self._kind}: {k} given twice (positionally and by keyword)")
                descs[k] = kw.pop(k)
        hint = kw.pop("hint_fwd_pd", None)
        attr = kw.pop("attr", None)
        alpha = float(kw.pop("alpha", 0.0))
        beta = float(kw.pop("beta", 0.0))
        flags = kw.pop("flags", rnn_flags.undef)
        ext_given = kw.pop("extensions", None)
        kw.pop("allow_empty", None)
        if kw:
            raise invalid_arguments(f"{self._kind}: unknown keyword argument(s) {', '.join(kw)}")
        self._init_base(head["engine"], attr)
        try:
            self._flags = rnn_flags(int(flags))
        except ValueError:
            raise invalid_arguments(f"{self._kind}: flags must be rnn_flags values, got {flags!r}") from None
        try:
            prop = prop_kind(head["prop_kind"])
        except ValueError:
            raise invalid_arguments(f"{self._kind}: unknown prop_kind {head['prop_kind']!r}") from None
        if prop != prop_kind.backward:
            raise invalid_arguments(f"{self._kind}: prop_kind must be backward, got {prop.name}")
        # -- the forward problem ------------------------------------------------------------------
        if hint is None:
            raise invalid_arguments(f"{self._kind}: hint_fwd_pd is required (the forward "
                                    f"{self._fwd_cls.__name__}.primitive_desc of the training pass)")
        if not isinstance(hint, self._fwd_cls.primitive_desc):
            raise invalid_arguments(
                f"{self._kind}: hint_fwd_pd must be a {self._fwd_cls.__name__}.primitive_desc, got "
                f"{type(hint).__qualname__}")
        if hint.get_prop_kind() != prop_kind.forward_training:
            raise invalid_arguments(
                f"{self._kind}: hint_fwd_pd was created for {hint.get_prop_kind().name}; backward needs "
                f"the forward_training primitive descriptor (its workspace holds what backward reads)")
        fdescs = {k: v for k, v in descs.items() if k in DESC_NAMES}
        act = "tanh"
        if self._has_activation:
            try:
                alg = algorithm(head["activation"])
            except ValueError:
                alg = None
            if alg not in fwd._ACTIVATIONS:
                raise invalid_arguments(
                    f"{self._kind}: activation must be algorithm.eltwise_relu, eltwise_tanh or "
                    f"eltwise_logistic, got {head['activation']!r}")
            act = fwd._ACTIVATIONS[alg]
            self._activation_alg = alg
        self._spec = hint._spec
        ext = hint.shape.ext
        if ext_given is not None and as_extensions(ext_given, self._kind) != ext:
            raise invalid_arguments(
                f"{self._kind}: extensions {ext_given!r} differ from hint_fwd_pd's {ext!r}")
        self.shape = check_shapes(self._spec, prop_kind.forward_training, head["direction"], fdescs,
                                  activation=act, alpha=alpha, kind=self._kind, ext=ext)
        if self.shape != hint.shape:
            raise invalid_arguments(
                f"{self._kind}: the problem differs from hint_fwd_pd's "
                f"({_shape_str(self.shape)} vs {_shape_str(hint.shape)})")
        if self.shape.dt != data_type.f32:
            raise unimplemented(f"{self._kind}: backward is implemented for f32 only, got {self.shape.dt.name}")
        self._hint = hint
        self._prop = prop
        self._direction = rnn_direction(head["direction"])
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
                    raise invalid_arguments(f"{self._kind}: {dname} is required for {self._spec.name}")
                self._descs[dname] = MemoryDesc()
                continue
            f_md = self._descs.get(fname)
            if not _present(f_md):
                if fname in ("src_iter_desc", "src_iter_c_desc", "dst_iter_desc", "dst_iter_c_desc"):
                    f_md = _state_desc(self.shape, fname)
                else:
                    raise invalid_arguments(f"{self._kind}: {dname} given but {fname} is absent")
            if list(md.dims) != list(f_md.dims):
                raise invalid_arguments(
                    f"{self._kind}: {dname} dims {list(md.dims)} must equal {fname} dims {list(f_md.dims)}")
            if md.data_type not in (data_type.f32, data_type.undef):
                raise unimplemented(f"{self._kind}: {dname} must be f32, got {md.data_type.name}")
            resolved = fwd.canonical_desc(fname, md) if md.is_any() else md
            self._descs[dname] = resolved
            self._args[arg] = ArgSpec(resolved, written, True)
        self._args[ARG_WORKSPACE] = ArgSpec(hint.workspace_desc(), False, True)
        self.ws_regions = hint.ws_regions
        from .plan_backward import scratch_regions

        self.scratch = scratch_regions(self)
        self._finish_scratchpad(self.scratch.nbytes())
        self._impl = "loopy:gemm+cell"
        s = self.shape
        self._info = (f"alg:{self._spec.name} direction:{self._direction.name} prop:backward "
                      f"l{s.L}t{s.T}mb{s.N}sic{s.SIC}slc{s.SLC}dhc{s.DHC}dic{s.DIC}"
                      + (" flags:overwrite" if self._flags & rnn_flags.diff_weights_overwrite else ""))

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
    return (f"{s.cell} {s.direction.name} l{s.L}t{s.T}mb{s.N}sic{s.SIC}slc{s.SLC}dhc{s.DHC}"
            f"dic{s.DIC}")


class rnn_backward_base(primitive):
    def _create(self) -> None:
        from .plan_backward import BackwardPlan

        self._plan = BackwardPlan(self._pd)

    def _execute(self, s, args) -> None:
        self._plan.execute(s, args)


def _make(cls_name: str, fwd_cls, signatures, has_activation=False, doc=""):
    return fwd.make_classes(cls_name, rnn_backward_pd_base, rnn_backward_base, doc,
                            _cell=fwd_cls.primitive_desc._cell, _signatures=signatures,
                            _has_activation=has_activation, _fwd_cls=fwd_cls)


def _bwd_sig(fwd_sig: tuple[str, ...]) -> tuple[str, ...]:
    """oneDNN's order: the forward descs, then the diff of each, in the same order (diff of
    the peephole/projection/bias weights following the diff weights)."""
    return fwd_sig + tuple(_diff_name(n) for n in fwd_sig)


vanilla_rnn_backward = _make(
    "vanilla_rnn_backward", fwd.vanilla_rnn_forward,
    tuple(_bwd_sig(s) for s in fwd.vanilla_rnn_forward.primitive_desc._signatures),
    has_activation=True,
    doc="``vanilla_rnn_backward.primitive_desc(engine, prop_kind, activation, direction, "
        "src_layer, src_iter, weights_layer, weights_iter, bias, dst_layer, dst_iter, "
        "diff_src_layer, diff_src_iter, diff_weights_layer, diff_weights_iter, diff_bias, "
        "diff_dst_layer, diff_dst_iter, hint_fwd_pd, attr=None, alpha=0, beta=0)``")
lstm_backward = _make(
    "lstm_backward", fwd.lstm_forward,
    tuple(_bwd_sig(s) for s in fwd.lstm_forward.primitive_desc._signatures),
    doc="``lstm_backward.primitive_desc(engine, prop_kind, direction, <the forward descs>, "
        "<their diff descs in the same order>, hint_fwd_pd, attr=None)``; peephole and "
        "projection variants as in lstm_forward")
gru_backward = _make("gru_backward", fwd.gru_forward,
                     tuple(_bwd_sig(s) for s in fwd.gru_forward.primitive_desc._signatures),
                     doc="``gru_backward.primitive_desc(engine, prop_kind, direction, src_layer, "
                         "src_iter, weights_layer, weights_iter, bias, dst_layer, dst_iter, "
                         "diff_src_layer, diff_src_iter, diff_weights_layer, diff_weights_iter, "
                         "diff_bias, diff_dst_layer, diff_dst_iter, hint_fwd_pd, attr=None)``")
lbr_gru_backward = _make("lbr_gru_backward", fwd.lbr_gru_forward,
                         tuple(_bwd_sig(s) for s in fwd.lbr_gru_forward.primitive_desc._signatures),
                         doc="as gru_backward, for lbr_gru")
augru_backward = _make("augru_backward", fwd.augru_forward,
                       tuple(_bwd_sig(s) for s in fwd.augru_forward.primitive_desc._signatures),
                       doc="as gru_backward with attention and diff_attention after the iter descs")
lbr_augru_backward = _make("lbr_augru_backward", fwd.lbr_augru_forward,
                           tuple(_bwd_sig(s) for s in fwd.lbr_augru_forward.primitive_desc._signatures),
                           doc="as augru_backward, for lbr_augru")

__all__ = ["vanilla_rnn_backward", "lstm_backward", "gru_backward", "lbr_gru_backward",
           "augru_backward", "lbr_augru_backward"]
