"""Convolution and deconvolution primitive descriptors and primitives (forward, backward data,
backward weights), oneDNN's API; the work is done by solvers (:mod:`.solvers`).

Every descriptor accepts oneDNN's positional forms, with or without bias and with or without
``dilates`` (``None`` for an absent bias), and every argument by keyword (see
:func:`_signature`). pydnnl extensions (keyword only): ``solver=`` pins a solver by name
(``direct``, ``im2col_gemm``, ``implicit_gemm``, ``winograd_f2x3``, ``fft``),
``solver_params=`` its tuning parameters; backward descriptors accept ``hint_fwd_pd=None``.
"""
from __future__ import annotations

from ...constants import (
    ARG_BIAS,
    ARG_DIFF_BIAS,
    ARG_DIFF_DST,
    ARG_DIFF_SRC,
    ARG_DIFF_WEIGHTS,
    ARG_DST,
    ARG_SCRATCHPAD,
    ARG_SRC,
    ARG_WEIGHTS,
    algorithm,
    prop_kind,
)
from ...conv_shapes import ConvGeometry, ConvProblem, validate_conv
from ...error import error, invalid_arguments, out_of_memory, runtime_error, unimplemented
from ...kernels.conv_common import grouped_layout, layout_of, swap_channel_dims
from ...kernels.post_ops import describe as describe_post_ops
from ...kernels.post_ops import reads_prior
from ...memory import memory
from ...memory.data_types import data_type
from ...memory.desc import MemoryDesc
from ...runtime.heuristics.conv import WORKSPACE_MEMORY_SHARE, workspace_limit
from ...runtime.plan import ALIGN
from ..base import ArgSpec, bias_queries, primitive, primitive_desc_base
from ..post_ops import WITH_PRELU
from ..post_ops import resolve as resolve_post_ops
from ..signature import BOOL, DIMS, Signature, bind
from . import int8
from .find import FIND_FAMILY, ConvFindResult, find
from .low_precision import Staging, add_steps, check_data_types, is_low, stage, user_key
from .solvers import Solver, get_solver, heuristic_order, solvers

_ACT_TAGS = {"nchw": {1: "abc", 2: "abcd", 3: "abcde"},
             "nhwc": {1: "acb", 2: "acdb", 3: "acdeb"}}

# descriptor names of each direction, in oneDNN's positional order; (name, arg, is output)
_DESCS = {
    "fwd": (("src_desc", ARG_SRC, False), ("weights_desc", ARG_WEIGHTS, False),
            ("bias_desc", ARG_BIAS, False), ("dst_desc", ARG_DST, True)),
    "bwd_d": (("diff_src_desc", ARG_DIFF_SRC, True), ("weights_desc", ARG_WEIGHTS, False),
              ("diff_dst_desc", ARG_DIFF_DST, False)),
    "bwd_w": (("src_desc", ARG_SRC, False), ("diff_weights_desc", ARG_DIFF_WEIGHTS, True),
              ("diff_bias_desc", ARG_DIFF_BIAS, True), ("diff_dst_desc", ARG_DIFF_DST, False)),
}
# logical tensor of each descriptor name
_LOGICAL = {"src_desc": "src", "diff_src_desc": "src", "weights_desc": "wei",
            "diff_weights_desc": "wei", "bias_desc": "bias", "diff_bias_desc": "bias",
            "dst_desc": "dst", "diff_dst_desc": "dst"}
_DIMS = ("strides", "dilates", "padding_l", "padding_r")
# solvers whose GEMM reads the tensors' own values (im2col copies them): bf16/f16 inputs stay
# exact there; Winograd and FFT multiply transforms of them
_EXACT_GEMM_SOLVERS = ("im2col_gemm",)


def _signature(kind: str, direction: str) -> Signature:
    """oneDNN's forms: the descs (bias optional where there is one), then strides, [dilates,]
    padding_l, padding_r, then hint_fwd_pd (backward), attr, allow_empty."""
    descs = tuple(n for n, _, _ in _DESCS[direction])
    bias = next((n for n in descs if "bias" in n), None)
    no_bias = tuple(n for n in descs if n != bias)
    dims = (_DIMS, tuple(n for n in _DIMS if n != "dilates"))
    forms = tuple(d + g for d in ((descs, no_bias) if bias else (descs,)) for g in dims)
    return Signature(
        f"{kind}.primitive_desc",
        head=("engine",) + (("prop_kind",) if direction == "fwd" else ()) + ("algorithm",),
        forms=forms,
        tail=(() if direction == "fwd" else ("hint_fwd_pd",)) + ("attr", "allow_empty"),
        keyword_only=("solver", "solver_params", "_use_db"),
        optional=frozenset({"dilates", "padding_r"} | ({bias} if bias else set())),
        aliases={"aengine": "engine", "aprop_kind": "prop_kind", "aalgorithm": "algorithm",
                 "dilation": "dilates", "dilations": "dilates"},
        kinds={**{n: DIMS for n in _DIMS}, "allow_empty": BOOL},
        defaults={"allow_empty": False, "_use_db": True})


def _workspace(s: Solver, problem: ConvProblem, params: dict) -> int:
    """Solver ``s``'s scratchpad bytes for ``problem`` (its plan, built dry); a solver that
    cannot lay out its plan raises :class:`unimplemented`, which ``auto`` and ``find`` skip."""
    try:
        return s.workspace_bytes(problem, params)
    except error:
        raise
    except ValueError as e:
        raise unimplemented(f"{s.name}: cannot plan the problem ({e})") from e


class conv_pd_base(bias_queries, primitive_desc_base):
    """Shared parsing, validation, layout negotiation, solver choice and queries."""

    _op = "convolution"       # or "deconvolution"
    _dir = "fwd"              # "fwd", "bwd_d" or "bwd_w"
    _kind = "convolution_forward"
    # a window of src (or diff_dst) feeds many outputs: no output may overlap another argument
    _IN_PLACE: frozenset = frozenset()

    _fwd_pd_class: type | None = None
    signature: Signature

    # -- construction ----------------------------------------------------------------------------
    def __init__(self, *args, **kw):
        a = bind(self.signature, args, kw)
        descs = self._check_descs(a)
        dims = self._check_dims(a)
        self._init_base(a["engine"], a["attr"])
        self._prop = self._check_prop(a.get("prop_kind"))
        self._alg = self._check_alg(a["algorithm"])
        self._hint = self._check_hint_type(a.get("hint_fwd_pd"))
        self._user = descs
        self._int8 = self._dir == "fwd" and int8.is_int8(self._dir, descs)
        self._geom = self._validate(descs, dims)
        if self._int8:  # u8/s8 src: the integer GEMM (no solver choice)
            name = int8.solver_name(self._op)
            if a["solver"] not in (None, name):
                raise invalid_arguments(f"{self._kind}: solver {a['solver']!r} with int8 src; "
                                        f"the int8 {self._op}'s solver is {name}")
            self._dims = dims
            int8.init(self, descs)
            return
        self._check_hint_geometry()
        self._post_ops = self._check_attr()
        self._dims = dims
        self._choose(a["solver"], a["solver_params"], a["_use_db"])

    def _check_descs(self, a: dict) -> dict:
        descs = {}
        for n, _, _ in _DESCS[self._dir]:
            md = a.get(n)
            if md is None or (isinstance(md, MemoryDesc) and md.is_zero()):
                if n in self.signature.optional:
                    descs[n] = None
                    continue
                raise invalid_arguments(f"{self._kind}: {n} is required, got {md!r}")
            if not isinstance(md, MemoryDesc):
                raise invalid_arguments(
                    f"{self._kind}: {n} must be a memory.desc, got {type(md).__name__}")
            descs[n] = md
        return descs

    def _check_dims(self, a: dict) -> dict:
        dims = {}
        for k in _DIMS:
            v = a.get(k)
            if v is not None and not DIMS.accepts(v):
                raise invalid_arguments(f"{self._kind}: {k} must be a list of ints, got {v!r}")
            dims[k] = None if v is None else [int(x) for x in v]
        for k in ("strides", "padding_l"):
            if dims[k] is None:
                raise invalid_arguments(f"{self._kind}.primitive_desc: missing {k}")
        if dims["padding_r"] is None:  # pydnnl extension: symmetric padding
            dims["padding_r"] = list(dims["padding_l"])
        return dims

    def _check_prop(self, pk):
        if self._dir == "bwd_d":
            return prop_kind.backward_data
        if self._dir == "bwd_w":
            return prop_kind.backward_weights
        try:
            pk = prop_kind(pk)
        except ValueError:
            pk = None
        if pk not in (prop_kind.forward_training, prop_kind.forward_inference):
            raise invalid_arguments(f"{self._kind}: prop_kind must be forward_training or "
                                    f"forward_inference, got {pk!r}")
        return pk

    def _check_alg(self, alg) -> algorithm:
        try:
            alg = algorithm(alg)
        except ValueError:
            raise invalid_arguments(f"{self._kind}: unknown algorithm {alg!r}") from None
        ok = ((algorithm.convolution_direct, algorithm.convolution_winograd,
               algorithm.convolution_auto) if self._op == "convolution" else
              (algorithm.deconvolution_direct, algorithm.deconvolution_winograd,
               algorithm.convolution_auto))
        if alg not in ok:
            raise invalid_arguments(f"{self._kind}: algorithm must be one of "
                                    f"{', '.join(a.name for a in ok)}, got {alg.name}")
        return alg

    def _check_hint_type(self, hint):
        if hint is None:
            return None
        want = self._fwd_pd_class
        if want is not None and not isinstance(hint, want):
            raise invalid_arguments(
                f"{self._kind}: hint_fwd_pd must be a {self._op}_forward.primitive_desc, got "
                f"{type(hint).__qualname__}")
        return hint

    def _validate(self, descs: dict, dims: dict) -> ConvGeometry:
        by = {_LOGICAL[n]: md for n, md in descs.items()}
        if not getattr(self, "_int8", False):
            check_data_types(self._kind, self._dir, descs)
        bias = by.get("bias")
        deconv = self._op == "deconvolution"
        geom = validate_conv(by["src"].dims, by["wei"].dims, dims["strides"], dims.get("dilates"),
                             dims["padding_l"], dims["padding_r"], deconvolution=deconv,
                             bias_dims=bias.dims if bias is not None else None, op=self._kind)
        want = geom.dst_dims()
        if tuple(by["dst"].dims) != tuple(want):
            rule = ("(in-1)*s + (k-1)*(d+1)+1 - pl - pr" if deconv
                    else "(in - ((k-1)*(d+1)+1) + pl + pr) / s + 1")
            dname = [n for n in descs if _LOGICAL[n] == "dst"][0]
            raise invalid_arguments(
                f"{self._kind}: {dname} dims {list(by['dst'].dims)} do not match the "
                f"{list(want)} that src {list(by['src'].dims)}, weights {list(by['wei'].dims)}, "
                f"strides {list(geom.strides)}, dilates {list(geom.dilates)}, padding_l "
                f"{list(geom.padding_l)} and padding_r {list(geom.padding_r)} give (out = {rule})")
        return geom

    def _check_hint_geometry(self) -> None:
        h = self._hint
        if h is None:
            return
        mine, theirs = self._geom, h._geom
        for what in ("src_dims", "dst_dims", "grouped_weights_dims"):
            a, b = getattr(mine, what)(), getattr(theirs, what)()
            if tuple(a) != tuple(b):
                raise invalid_arguments(
                    f"{self._kind}: hint_fwd_pd does not match: its {what.replace('_dims', '')} "
                    f"dims are {list(b)}, this primitive's are {list(a)}")
        for what in ("strides", "dilates", "padding_l", "padding_r"):
            a, b = getattr(mine, what), getattr(theirs, what)
            if tuple(a) != tuple(b):
                raise invalid_arguments(
                    f"{self._kind}: hint_fwd_pd does not match: its {what} are {list(b)}, this "
                    f"primitive's are {list(a)}")

    def _check_attr(self) -> tuple:
        a = self._attr
        if a.scales or a.zero_points:
            raise unimplemented(f"{self._kind}: scales and zero points are not implemented for "
                                f"f32 convolution")
        ops = a.get_post_ops().ops
        if ops and self._dir != "fwd":
            raise unimplemented(f"{self._kind}: post-ops apply to forward propagation only")
        self._post_op_args = {}
        if not ops:
            return ()
        chain, self._post_op_args = resolve_post_ops(self._kind, a, self._user["dst_desc"],
                                                         allowed=WITH_PRELU)
        return chain

    # -- solver choice and layouts -------------------------------------------------------------
    def _conv_kind(self) -> str:
        if self._op == "convolution":
            return self._dir
        return {"fwd": "bwd_d", "bwd_d": "fwd", "bwd_w": "bwd_w"}[self._dir]

    def _allowed(self) -> list[str] | None:
        """Solver names the algorithm admits (None: any, chosen automatically)."""
        if self._alg == algorithm.convolution_auto:
            return None
        fam = "winograd" if self._alg in (algorithm.convolution_winograd,
                                         algorithm.deconvolution_winograd) else "direct"
        return [n for n, s in solvers().items() if s.family == fam]

    def _choose(self, solver_name, solver_params, use_db: bool) -> None:
        allowed = self._allowed()
        kind = self._conv_kind()
        db_params = {}
        if solver_name is not None:
            s = get_solver(solver_name)
            if allowed is not None and solver_name not in allowed:
                raise invalid_arguments(
                    f"{self._kind}: solver {solver_name!r} does not implement algorithm "
                    f"{self._alg.name} (its solvers: {', '.join(allowed)})")
            order = [solver_name]
        else:
            # the heuristic's order, limited to the algorithm's solvers (oneDNN's "direct" is
            # every non-Winograd method, GEMM-based ones included), led by a stored find
            # result of the family
            names = list(solvers()) if allowed is None else allowed
            order = [n for n in heuristic_order(kind, self._geom.as_convolution(), self._engine,
                                                self._gemm_math() or "strict")
                     if n in names]
            order += [n for n in names if n not in order]
            if use_db:
                hit = self._db_lookup()
                if hit is not None and hit.get("solver") in names:
                    order = [hit["solver"]] + [n for n in order if n != hit["solver"]]
                    db_params = {hit["solver"]: dict(hit.get("params") or {})}
        reasons: list[str] = []
        too_big: list[str] = []
        limit = workspace_limit(self._engine.info)
        for name in order:
            s = get_solver(name)
            descs = self._resolve_layouts(s)
            problem, staging = self._problem(descs, 0)
            why = s.why_not(problem, self._engine) or ("" if s.is_applicable(problem, self._engine)
                                                        else "not applicable")
            if why:
                reasons.append(f"{name}: {why}")
                continue
            params = s.default_params(problem, self._engine)
            if name in db_params:
                params.update(db_params[name])
            if solver_params is not None and name == order[0]:
                params.update(solver_params)
            try:
                problem, staging, ws = self._sized(s, descs, problem, staging, params)
            except unimplemented as e:  # the solver cannot plan it: try the next one
                reasons.append(str(e))
                continue
            if ws > limit:  # a valid problem must not fail at allocation: try the next solver
                too_big.append(f"{name}: workspace {ws} bytes")
                continue
            self._finish(s, params, descs, problem, ws, staging)
            return
        if too_big:
            raise out_of_memory(
                f"{self._kind}: every applicable solver's workspace exceeds the device's limit "
                f"of {limit} bytes (max allocation {self._engine.info.max_mem_alloc_bytes}, "
                f"{WORKSPACE_MEMORY_SHARE:g} of {self._engine.info.global_mem_bytes} bytes of "
                f"global memory): "
                + "; ".join(too_big) + ("; " + "; ".join(reasons) if reasons else ""))
        raise unimplemented(f"{self._kind}: no solver for algorithm {self._alg.name} applies: "
                            + "; ".join(reasons))

    def _resolve_layouts(self, s: Solver) -> dict:
        """The user's descs with ``any`` replaced by the layouts solver ``s`` prefers."""
        nsp = len(self._geom.kernel)
        act_family, wei_order = s.preferred(self._conv_kind(), nsp)
        out = {}
        wei_any = None  # the weights desc resolved here without a hint
        by_logical = {_LOGICAL[n]: (n, md) for n, md in self._user.items()}
        hint_md = {}
        if self._hint is not None:
            h = self._hint
            hint_md = {"src": h._descs_by_logical.get("src"), "dst": h._descs_by_logical.get("dst"),
                       "wei": h._descs_by_logical.get("wei")}
        for n, md in self._user.items():
            if md is None or not md.is_any():
                out[n] = md
                continue
            lg = _LOGICAL[n]
            if lg == "bias":
                out[n] = MemoryDesc(md.dims, md.data_type, "a")
                continue
            h = hint_md.get(lg)
            if h is not None and tuple(h.dims) == tuple(md.dims):
                out[n] = h if h.data_type == md.data_type else h.with_data_type(md.data_type)
                continue
            if lg in ("src", "dst"):
                other = by_logical["dst" if lg == "src" else "src"][1]
                tag = None
                if other is not None and not other.is_any() and other.tag is not None:
                    canon = other.tag.canonical
                    if canon in _ACT_TAGS["nchw"].values() or canon in _ACT_TAGS["nhwc"].values():
                        tag = canon
                out[n] = MemoryDesc(md.dims, md.data_type, tag or _ACT_TAGS[act_family][nsp])
            else:
                out[n] = MemoryDesc(md.dims, md.data_type, self._wei_tag(wei_order, nsp))
                wei_any = n
        if wei_any is not None:
            self._solver_weights(s, out, wei_any)
        return out

    def _solver_weights(self, s: Solver, out: dict, name: str) -> None:
        """Replace the forward's resolved weights ``out[name]`` (an ``any`` without a hint)
        by the blocked layout solver ``s`` reads fastest, where it has one (the im2col GEMM's
        packed panels): only for a convolution of f32 tensors with non-grouped weights."""
        if self._op != "convolution" or self._dir != "fwd" or self._geom.grouped_weights \
                or any(md is not None and md.data_type != data_type.f32
                       for md in out.values()):
            return
        problem, _ = self._problem(out, 0)
        tag = s.weights_any(problem, self._engine, tuple(out[name].dims))
        if tag is not None:
            out[name] = MemoryDesc(out[name].dims, data_type.f32, tag)

    def _wei_tag(self, order: str, nsp: int) -> str:
        """Canonical tag of the user's weights dims storing the conv roles in ``order``."""
        grouped = self._geom.grouped_weights
        deconv = self._op == "deconvolution"
        base = 1 if grouped else 0
        role = {"o": base + (1 if deconv else 0), "i": base + (0 if deconv else 1)}
        letters = "abcdefghijkl"
        out = []
        for r in order:
            if r == "g":
                if grouped:
                    out.append("a")
            elif r == "k":
                out.extend(letters[base + 2 + i] for i in range(nsp))
            else:
                out.append(letters[role[r]])
        return "".join(out)

    def _sized(self, s: Solver, descs: dict, problem: ConvProblem, staging: Staging | None,
               params: dict) -> tuple[ConvProblem, Staging | None, int]:
        """``(problem, staging, scratchpad bytes)``: the solver's workspace, and for bf16/f16
        arguments their f32 copies placed after it (a problem whose copies lie elsewhere
        could need other regions, so the placement is repeated until it holds)."""
        ws = _workspace(s, problem, params)
        if staging is None:
            return problem, None, ws
        for _ in range(4):
            need = -(-ws // 4)  # the solver's own scratchpad elements
            if need <= staging.base:
                return problem, staging, staging.end * 4
            problem, staging = self._problem(descs, -(-need // ALIGN) * ALIGN)
            ws = _workspace(s, problem, params)
        raise unimplemented(f"{s.name}: its workspace changes with where the f32 copies of "
                            f"the bf16/f16 arguments lie")

    def _problem(self, descs: dict, base: int = 0) -> tuple[ConvProblem, Staging | None]:
        """The solver's f32 problem of ``descs``, with the f32 copies of bf16/f16 arguments
        from scratchpad element ``base`` on (their :class:`Staging`; None when all are
        f32)."""
        staging = None
        if any(is_low(md) for md in descs.values()):
            roles = {n: self._role(_LOGICAL[n]) for n in descs}
            outputs = {n for n, _, out in _DESCS[self._dir] if out}
            descs, staging = stage(descs, _LOGICAL, roles, outputs,
                                   reads_prior(self._post_ops), base)
        by = {_LOGICAL[n]: md for n, md in descs.items()}
        wlay = grouped_layout(by["wei"], self._geom.grouped_weights)
        bias = by.get("bias")
        deconv = self._op == "deconvolution"
        src, dst = (by["dst"], by["src"]) if deconv else (by["src"], by["dst"])
        return ConvProblem(
            **vars(self._geom.as_convolution()), kind=self._conv_kind(), src=layout_of(src),
            wei=swap_channel_dims(wlay) if deconv else wlay, dst=layout_of(dst),
            src_n=src.nelems_physical(), wei_n=by["wei"].nelems_physical(),
            dst_n=dst.nelems_physical(), bias=layout_of(bias) if bias is not None else None,
            bias_n=bias.nelems_physical() if bias is not None else 0,
            bias_of="src" if deconv else "dst", post_ops=self._post_ops), staging

    def _role(self, logical: str) -> str:
        """The solver's buffer holding logical tensor ``logical`` (src/dst swap for a
        deconvolution, which runs as the convolution it transposes)."""
        if self._op == "deconvolution":
            return {"src": "dst", "dst": "src"}.get(logical, logical)
        return logical

    def _finish(self, s: Solver, params: dict, descs: dict, problem: ConvProblem,
                ws: int, staging: Staging | None = None) -> None:
        self._solver = s
        self._staging = staging
        self._params = params
        self._problem_ = problem
        self._descs = descs
        self._descs_by_logical = {_LOGICAL[n]: md for n, md in descs.items()}
        self._roles = {}
        staged = staging.roles() if staging is not None else ()
        for name, arg, out in _DESCS[self._dir]:
            md = descs.get(name)
            if md is None:
                continue
            self._args[arg] = ArgSpec(md, out, True)
            role = self._role(_LOGICAL[name])
            # a bf16/f16 argument is bound under its own name; the role is its f32 copy
            self._roles[arg] = user_key(role) if role in staged else role
        self._args.update(self._post_op_args)  # binary post-ops' operands, bound by number
        self._finish_scratchpad(ws)
        if staged and s.name in _EXACT_GEMM_SOLVERS:
            # the GEMM multiplies the bf16/f16 values themselves (copied, not transformed):
            # where every operand it reads is of one such type, that format's tensor cores
            # multiply them exactly (primitive_desc_base._fpmath_mode)
            self._gemm_input_dts = tuple(
                md.data_type for name, _, out in _DESCS[self._dir]
                if not out and _LOGICAL[name] != "bias" and (md := descs.get(name)) is not None)
        self._impl = f"loopy:{s.name}" + (":f32_on_converted_copies" if staged else "")
        self._info = (f"alg:{self._alg.name} prop:{self._prop.name} solver:{s.name} "
                      f"{problem.describe()}") + (
            f" attr-post-ops:{describe_post_ops(self._post_ops)}" if self._post_ops else "") + (
            f" compute:{staging.describe().replace(' ', '_')}" if staged else "")

    # -- perf database -------------------------------------------------------------------------
    def find_key(self) -> str:
        """The problem as the find database knows it (user descs, ``any`` included)."""
        g = self._geom
        parts = [self._op, self._dir, f"mb{g.mb}g{g.groups}ic{g.ic}oc{g.oc}",
                 "i" + "x".join(map(str, g.src_spatial)), "o" + "x".join(map(str, g.dst_spatial)),
                 "k" + "x".join(map(str, g.kernel)), "s" + "x".join(map(str, g.strides)),
                 "d" + "x".join(map(str, g.dilates)), "pl" + "x".join(map(str, g.padding_l)),
                 "pr" + "x".join(map(str, g.padding_r)), "gw" if g.grouped_weights else "w"]
        for n, md in self._user.items():
            parts.append(f"{n.replace('_desc', '')}:{'none' if md is None else md.format_name()}"
                         f"@{0 if md is None else md.offset0}"
                         + (f":{md.data_type.name}" if is_low(md) else ""))
        parts.append("po:" + repr(self._post_ops))
        return "-".join(parts)

    def _db_lookup(self) -> dict | None:
        from ...tuning import PerfDB

        hit = PerfDB.default().get(self._engine.info.signature, FIND_FAMILY, self.find_key())
        return None if hit is None else hit[0]

    # -- queries -------------------------------------------------------------------------------
    def get_algorithm_kind(self) -> algorithm:
        return self._alg

    def get_prop_kind(self) -> prop_kind:
        return self._prop

    def get_strides(self) -> list[int]:
        return list(self._geom.strides)

    def get_dilations(self) -> list[int]:
        return list(self._geom.dilates)

    def get_padding_l(self) -> list[int]:
        return list(self._geom.padding_l)

    def get_padding_r(self) -> list[int]:
        return list(self._geom.padding_r)

    def get_solver(self) -> str:
        """The solver the descriptor chose (pydnnl extension)."""
        return self._solver.name

    def get_solver_params(self) -> dict:
        return dict(self._params)

    def workspace_bytes(self) -> int:
        return self._scratchpad_md.get_size() if not self._scratchpad_md.is_zero() else 0


class conv_primitive_base(primitive):
    """Builds the solver's plan once; ``execute`` enqueues it."""

    def _create(self) -> None:
        pd = self._pd
        if getattr(pd, "_int8", False):
            self._plan = int8.build_plan(pd)
            return
        try:
            self._plan = pd._solver.build_plan(pd._problem_, pd._params, pd._engine)
        except error:
            raise
        except ValueError as e:  # a plan the dry run accepted must not fail as a bare error
            raise runtime_error(f"{pd._kind}: solver {pd._solver.name} failed to build its "
                                f"plan: {e}") from e
        self._scratch = None  # the scratchpad of library mode, when bf16/f16 copies need one
        st = pd._staging
        if st is not None:
            if self._plan.scratch_elems > st.base:
                raise runtime_error(
                    f"{pd._kind}: solver {pd._solver.name} used {self._plan.scratch_elems} "
                    f"scratchpad elements, its dry run {st.base}")
            add_steps(self._plan, st)

    def _execute(self, s, args) -> list:
        """Enqueue the plan; returns its launches' events (Find times them)."""
        pd = self._pd
        if getattr(pd, "_int8", False):
            return self._plan.execute(s, args)
        if pd._staging is None:
            return self._plan.execute(s, args, pd._roles)
        # the solver reads and writes the f32 copies, which lie in the scratchpad: its roles
        # are bound to the scratchpad buffer, the user's memories under their own names
        scratch = args.get(ARG_SCRATCHPAD)
        if scratch is None:
            if self._scratch is None:
                self._scratch = memory(pd.scratchpad_desc(), pd.get_engine())
            scratch = self._scratch
            args = {**args, ARG_SCRATCHPAD: scratch}
        return self._plan.execute(s, args, pd._roles,
                                  **{role: scratch.buffer for role in pd._staging.roles()})

    @classmethod
    def find(cls, *args, exhaustive: bool = False, **kw) -> list[ConvFindResult]:
        """Run every applicable solver on the problem and rank them (MIOpen's Find); the best is
        stored in the perf database so that the next ``convolution_auto`` picks it."""
        return find(cls, args, kw, exhaustive)


class convolution_forward(conv_primitive_base):
    """Convolution forward propagation; execute with ARG_SRC, ARG_WEIGHTS, [ARG_BIAS,] ARG_DST."""

    class primitive_desc(conv_pd_base):
        """``convolution_forward.primitive_desc(engine, prop_kind, algorithm, src_desc,
        weights_desc, [bias_desc,] dst_desc, strides, [dilates,] padding_l, padding_r,
        attr=None)``."""

        _kind, _op, _dir = "convolution_forward", "convolution", "fwd"
        signature = _signature(_kind, _dir)


class convolution_backward_data(conv_primitive_base):
    """Convolution backward data; execute with ARG_DIFF_DST, ARG_WEIGHTS, ARG_DIFF_SRC."""

    class primitive_desc(conv_pd_base):
        """``convolution_backward_data.primitive_desc(engine, algorithm, diff_src_desc,
        weights_desc, diff_dst_desc, strides, [dilates,] padding_l, padding_r, hint_fwd_pd,
        attr=None)``."""

        _kind, _op, _dir = "convolution_backward_data", "convolution", "bwd_d"
        _fwd_pd_class = convolution_forward.primitive_desc
        signature = _signature(_kind, _dir)


class convolution_backward_weights(conv_primitive_base):
    """Convolution backward weights; execute with ARG_SRC, ARG_DIFF_DST, ARG_DIFF_WEIGHTS,
    [ARG_DIFF_BIAS]."""

    class primitive_desc(conv_pd_base):
        """``convolution_backward_weights.primitive_desc(engine, algorithm, src_desc,
        diff_weights_desc, [diff_bias_desc,] diff_dst_desc, strides, [dilates,] padding_l,
        padding_r, hint_fwd_pd, attr=None)``."""

        _kind, _op, _dir = "convolution_backward_weights", "convolution", "bwd_w"
        _fwd_pd_class = convolution_forward.primitive_desc
        signature = _signature(_kind, _dir)


class deconvolution_forward(conv_primitive_base):
    """Deconvolution (transposed convolution) forward propagation, weights [OC, IC, k...] or
    [G, OC/G, IC/G, k...]; execute with ARG_SRC, ARG_WEIGHTS, [ARG_BIAS,] ARG_DST."""

    class primitive_desc(conv_pd_base):
        """``deconvolution_forward.primitive_desc(engine, prop_kind, algorithm, src_desc,
        weights_desc, [bias_desc,] dst_desc, strides, [dilates,] padding_l, padding_r,
        attr=None)``."""

        _kind, _op, _dir = "deconvolution_forward", "deconvolution", "fwd"
        signature = _signature(_kind, _dir)


class deconvolution_backward_data(conv_primitive_base):
    """Deconvolution backward data; execute with ARG_DIFF_DST, ARG_WEIGHTS, ARG_DIFF_SRC."""

    class primitive_desc(conv_pd_base):
        """``deconvolution_backward_data.primitive_desc(engine, algorithm, diff_src_desc,
        weights_desc, diff_dst_desc, strides, [dilates,] padding_l, padding_r, hint_fwd_pd,
        attr=None)``."""

        _kind, _op, _dir = "deconvolution_backward_data", "deconvolution", "bwd_d"
        _fwd_pd_class = deconvolution_forward.primitive_desc
        signature = _signature(_kind, _dir)


class deconvolution_backward_weights(conv_primitive_base):
    """Deconvolution backward weights; execute with ARG_SRC, ARG_DIFF_DST, ARG_DIFF_WEIGHTS,
    [ARG_DIFF_BIAS]."""

    class primitive_desc(conv_pd_base):
        """``deconvolution_backward_weights.primitive_desc(engine, algorithm, src_desc,
        diff_weights_desc, [diff_bias_desc,] diff_dst_desc, strides, [dilates,] padding_l,
        padding_r, hint_fwd_pd, attr=None)``."""

        _kind, _op, _dir = "deconvolution_backward_weights", "deconvolution", "bwd_w"
        _fwd_pd_class = deconvolution_forward.primitive_desc
        signature = _signature(_kind, _dir)


__all__ = ["convolution_forward", "convolution_backward_data", "convolution_backward_weights",
           "deconvolution_forward", "deconvolution_backward_data",
           "deconvolution_backward_weights", "conv_pd_base", "FIND_FAMILY"]
