"""RNN problem description: shapes read from the descs, checked with oneDNN's consistency rules."""
from __future__ import annotations

from dataclasses import dataclass

from ...cells import CellSpec
from ...constants import prop_kind, rnn_direction
from ...error import invalid_arguments, unimplemented
from ...memory.data_types import data_type
from ...memory.desc import MemoryDesc
from .extensions import rnn_extensions

# descriptor names, as oneDNN's C++ API spells the parameters
DESC_NAMES = ("src_layer_desc", "src_iter_desc", "src_iter_c_desc", "attention_desc",
              "weights_layer_desc", "weights_iter_desc", "weights_peephole_desc",
              "weights_projection_desc", "bias_desc", "dst_layer_desc", "dst_iter_desc",
              "dst_iter_c_desc")


@dataclass(frozen=True)
class Int8Types:
    """Data types of an int8 RNN (oneDNN's ``u8u8u8u8``, ``f32u8f32f32``, ... configurations,
    named src_iter, src_layer, dst_iter, dst_layer): ``data`` is the quantized type of the
    states (u8 or s8), the others are ``data`` or f32 (absent tensors count as ``data``)."""

    data: data_type
    src_iter: data_type
    dst_iter: data_type
    dst_layer: data_type

    @property
    def cfg(self) -> str:
        """oneDNN benchdnn's name of the configuration (``u8u8u8f32``, ``f32s8f32s8``, ...)."""
        return "".join(t.name for t in (self.src_iter, self.data, self.dst_iter,
                                        self.dst_layer))

    @property
    def limits(self) -> tuple[int, int]:
        """The range quantized values saturate to."""
        return (0, 255) if self.data == data_type.u8 else (-128, 127)


@dataclass(frozen=True)
class RnnShape:
    """Sizes of one RNN problem (oneDNN's letters) and its cell's spec."""

    spec: CellSpec
    T: int
    N: int
    L: int
    D: int
    SLC: int
    SIC: int
    DHC: int
    DIC: int
    G: int
    Gb: int
    direction: rnn_direction
    with_src_iter: bool
    with_src_iter_c: bool
    with_dst_iter: bool
    with_dst_iter_c: bool
    peephole: bool
    projection: bool
    activation: str  # vanilla RNN: relu / tanh / logistic
    alpha: float
    dt: data_type
    ext: rnn_extensions = rnn_extensions()
    int8: Int8Types | None = None  # the data types of an int8 (u8/s8) inference problem

    @property
    def cell(self) -> str:
        """The cell kind's name (``vanilla_lstm``, ``lbr_gru``, ...)."""
        return self.spec.name

    @property
    def layer_in(self) -> int:
        """Input channels of layers l >= 1: the layer below's output (both directions'
        concatenation in per-layer bidirectional stacks)."""
        return 2 * self.DIC if self.ext.layer_bidirectional else self.DIC

    @property
    def DLC(self) -> int:
        return self.DIC * (2 if self.direction == rnn_direction.bidirectional_concat else 1)

    def flops_forward(self) -> int:
        """Multiply-adds x 2 of the GEMMs (elementwise work is not counted)."""
        g = 2 * self.T * self.N * self.G * self.DHC
        per_dir = 0
        for l in range(self.L):
            k_in = (0 if self.ext.skip_input else self.SLC) if l == 0 else self.layer_in
            per_dir += g * k_in + g * self.SIC
            if self.projection:
                per_dir += 2 * self.T * self.N * self.DHC * self.DIC
        return per_dir * self.D


def _dims(md: MemoryDesc) -> tuple[int, ...]:
    return tuple(md.dims)


def _present(md: MemoryDesc | None) -> bool:
    return md is not None and not md.is_zero()


# the default of check_shapes (rnn_extensions is frozen: one shared instance)
_NO_EXTENSIONS = rnn_extensions()


def check_shapes(spec: CellSpec, prop: prop_kind, direction: rnn_direction, descs: dict,
                 activation: str = "tanh", alpha: float = 0.0, kind: str = "rnn",
                 ext: rnn_extensions = _NO_EXTENSIONS) -> RnnShape:
    """Validate the forward descs of one RNN problem; return its sizes.

    ``descs`` maps :data:`DESC_NAMES` to memory descs or None. Raises ``invalid_arguments``
    naming the dims involved when a oneDNN consistency rule is violated.
    """

    def need(name: str, rank: int) -> tuple[int, ...]:
        md = descs.get(name)
        if not _present(md):
            raise invalid_arguments(f"{kind}: {name} is required, got {md!r}")
        d = _dims(md)
        if len(d) != rank:
            raise invalid_arguments(f"{kind}: {name} must have {rank} dims, got {list(d)}")
        return d

    def opt(name: str, rank: int) -> tuple[int, ...] | None:
        md = descs.get(name)
        if not _present(md):
            return None
        d = _dims(md)
        if len(d) != rank:
            raise invalid_arguments(f"{kind}: {name} must have {rank} dims, got {list(d)}")
        return d

    for name, md in descs.items():
        if md is not None and not isinstance(md, MemoryDesc):
            raise invalid_arguments(
                f"{kind}: {name} must be a memory.desc or None, got {type(md).__name__}")
    try:
        prop = prop_kind(prop)
    except ValueError:
        raise invalid_arguments(f"{kind}: unknown prop_kind {prop!r}") from None
    if prop not in (prop_kind.forward_training, prop_kind.forward_inference):
        raise invalid_arguments(
            f"{kind}: prop_kind must be forward_training or forward_inference, got {prop.name}")
    try:
        direction = rnn_direction(direction)
    except ValueError:
        raise invalid_arguments(f"{kind}: unknown direction {direction!r}") from None
    if direction == rnn_direction.undef:
        raise invalid_arguments(f"{kind}: direction must not be undef")

    if ext.packed:  # [sum(lengths), C] rows; T and N come from the lengths
        S, SLC = need("src_layer_desc", 2)
        T, N = max(ext.seq_lengths), len(ext.seq_lengths)
        if S != sum(ext.seq_lengths):
            raise invalid_arguments(
                f"{kind}: packed src_layer_desc has {S} rows, the sum of seq_lengths is "
                f"{sum(ext.seq_lengths)}")
    else:
        T, N, SLC = need("src_layer_desc", 3)
    L_i, D_i, SIC, G_i, DHC_i = need("weights_iter_desc", 5)
    if ext.skip_input and L_i == 1 and not _present(descs.get("weights_layer_desc")):
        # one skip-input layer has no input matrix at all
        L, D, SLC_w, G, DHC = L_i, D_i, SLC, G_i, DHC_i
    else:
        L, D, SLC_w, G, DHC = need("weights_layer_desc", 5)
    if ext.no_bias:
        if _present(descs.get("bias_desc")):
            raise invalid_arguments(f"{kind}: extensions.no_bias is set, so bias_desc must be None")
        Lb, Db, Gb, DHC_b = L, D, spec.n_bias_gates, DHC
    else:
        Lb, Db, Gb, DHC_b = need("bias_desc", 4)
    if ext.packed:
        S_d, DLC = need("dst_layer_desc", 2)
        T_d, N_d = (T, N) if S_d == S else (S_d, None)
    else:
        T_d, N_d, DLC = need("dst_layer_desc", 3)
    for v, what in ((T, "T (src_layer_desc dims[0])"), (N, "N (src_layer_desc dims[1])")):
        if v <= 0:
            raise invalid_arguments(f"{kind}: {what} must be positive, got {v}")
    expect_D = 2 if direction in (rnn_direction.bidirectional_concat,
                                  rnn_direction.bidirectional_sum) else 1
    if D != expect_D:
        raise invalid_arguments(
            f"{kind}: direction {direction.name} needs D = {expect_D} directions, "
            "weights_layer_desc "
            f"dims {[L, D, SLC_w, G, DHC]} have D = {D}")
    if G != spec.n_gates:
        raise invalid_arguments(
            f"{kind}: {spec.name} has {spec.n_gates} gates, weights_layer_desc dims "
            f"{[L, D, SLC_w, G, DHC]} have G = {G}")
    if SLC_w != SLC:
        raise invalid_arguments(
            f"{kind}: weights_layer_desc input channels {SLC_w} differ from src_layer_desc "
            f"SLC {SLC}")
    if (L_i, D_i, G_i, DHC_i) != (L, D, G, DHC):
        raise invalid_arguments(
            f"{kind}: weights_iter_desc dims {[L_i, D_i, SIC, G_i, DHC_i]} disagree with "
            f"weights_layer_desc dims {[L, D, SLC_w, G, DHC]} in L, D, G or DHC")
    if (Lb, Db, Gb, DHC_b) != (L, D, spec.n_bias_gates, DHC):
        raise invalid_arguments(
            f"{kind}: bias_desc dims must be [L, D, {spec.n_bias_gates}, DHC] = "
            f"{[L, D, spec.n_bias_gates, DHC]}, got {[Lb, Db, Gb, DHC_b]}")
    if ext.packed and (T_d, N_d) != (T, N):
        raise invalid_arguments(
            f"{kind}: packed dst_layer_desc has {S_d} rows, src_layer_desc has {S}")
    if (T_d, N_d) != (T, N):
        raise invalid_arguments(
            f"{kind}: dst_layer_desc dims {[T_d, N_d, DLC]} disagree with src_layer_desc dims "
            f"{[T, N, SLC]} in T or N")
    for v, what in ((L, "L"), (SLC, "SLC"), (SIC, "SIC"), (DHC, "DHC")):
        if v <= 0:
            raise invalid_arguments(f"{kind}: {what} must be positive, got {v}")

    peep = opt("weights_peephole_desc", 4)
    proj = opt("weights_projection_desc", 4)
    if peep is not None and not spec.supports_peephole:
        raise invalid_arguments(f"{kind}: {spec.name} takes no weights_peephole_desc")
    if proj is not None and not spec.supports_projection:
        raise invalid_arguments(f"{kind}: {spec.name} takes no weights_projection_desc")
    if peep is not None and peep != (L, D, 3, DHC):
        raise invalid_arguments(
            f"{kind}: weights_peephole_desc dims must be [L, D, 3, DHC] = {[L, D, 3, DHC]}, "
            f"got {list(peep)}")
    DIC = DHC
    if proj is not None:
        if proj[:3] != (L, D, DHC):
            raise invalid_arguments(
                f"{kind}: weights_projection_desc dims must be [L, D, DHC, DIC] with L, D, DHC = "
                f"{[L, D, DHC]}, got {list(proj)}")
        DIC = proj[3]
        if DIC <= 0:
            raise invalid_arguments(
                f"{kind}: DIC (weights_projection_desc dims[3]) must be positive, got {DIC}")
    mult = 2 if direction == rnn_direction.bidirectional_concat else 1
    if DLC != mult * DIC:
        raise invalid_arguments(
            f"{kind}: dst_layer_desc channels DLC = {DLC} must be {mult} x DIC = {mult * DIC} "
            f"for direction {direction.name}")
    if ext.layer_bidirectional:
        if direction != rnn_direction.bidirectional_concat:
            raise invalid_arguments(
                f"{kind}: extensions.layer_bidirectional needs direction bidirectional_concat, "
                f"got {direction.name}")
        if L > 1 and SLC != 2 * DIC:
            raise invalid_arguments(
                f"{kind}: in a per-layer bidirectional stack of L = {L} layers each layer reads "
                f"both directions of the one below, so SLC ({SLC}) must equal 2 x DIC ({2 * DIC})")
    elif L > 1 and SLC != DIC:
        raise invalid_arguments(
            f"{kind}: with L = {L} layers each layer reads the one below, so SLC ({SLC}) "
            f"must equal DIC ({DIC})")
    if T > 1 and SIC != DIC:
        raise invalid_arguments(
            f"{kind}: with T = {T} steps the recurrent input is the previous output, "
            f"so SIC ({SIC}) must equal DIC ({DIC})")
    if spec.requires_sic_eq_dhc and SIC != DHC:
        raise invalid_arguments(f"{kind}: {spec.name} needs SIC ({SIC}) equal to DHC ({DHC})")

    si = opt("src_iter_desc", 4)
    if si is not None and si != (L, D, N, SIC):
        raise invalid_arguments(
            f"{kind}: src_iter_desc dims must be [L, D, N, SIC] = {[L, D, N, SIC]}, "
            f"got {list(si)}")
    sic = opt("src_iter_c_desc", 4)
    di = opt("dst_iter_desc", 4)
    if di is not None and di != (L, D, N, DIC):
        raise invalid_arguments(
            f"{kind}: dst_iter_desc dims must be [L, D, N, DIC] = {[L, D, N, DIC]}, "
            f"got {list(di)}")
    dic = opt("dst_iter_c_desc", 4)
    if not spec.has_cell_state:
        for name, v in (("src_iter_c_desc", sic), ("dst_iter_c_desc", dic)):
            if v is not None:
                raise invalid_arguments(
                    f"{kind}: {spec.name} has no cell state; {name} must be None")
    for name, v in (("src_iter_c_desc", sic), ("dst_iter_c_desc", dic)):
        if v is not None and v != (L, D, N, DHC):
            raise invalid_arguments(
                f"{kind}: {name} dims must be [L, D, N, DHC] = {[L, D, N, DHC]}, "
                f"got {list(v)}")
    if spec.has_attention:
        att = descs.get("attention_desc")
        if not _present(att):
            raise invalid_arguments(f"{kind}: {spec.name} needs attention_desc [T, N, 1]")
        if _dims(att) not in ((T, N, 1), (T, N)):
            raise invalid_arguments(
                f"{kind}: attention_desc dims must be [T, N, 1] = {[T, N, 1]}, "
                f"got {list(_dims(att))}")
        if direction != rnn_direction.unidirectional_left2right:
            raise invalid_arguments(
                f"{kind}: {spec.name} supports only unidirectional_left2right, "
                f"got {direction.name}")
        if L != 1:
            raise invalid_arguments(f"{kind}: {spec.name} supports only L = 1 layer, got L = {L}")
    elif _present(descs.get("attention_desc")):
        raise invalid_arguments(f"{kind}: {spec.name} takes no attention_desc")

    if ext.seq_lengths is not None:
        lens = ext.seq_lengths
        if len(lens) != N and not ext.packed:
            raise invalid_arguments(
                f"{kind}: extensions.seq_lengths has {len(lens)} lengths, the batch N is {N}")
        if max(lens) > T:
            raise invalid_arguments(
                f"{kind}: extensions.seq_lengths must be in [1, T = {T}], got {max(lens)}")
        if spec.has_attention:
            raise unimplemented(f"{kind}: seq_lengths are not implemented for {spec.name}")
    if ext.skip_input and SLC != DHC:
        raise invalid_arguments(
            f"{kind}: extensions.skip_input adds the input to every gate, so SLC ({SLC}) must "
            f"equal DHC ({DHC})")
    if ext.cell_clip is not None and not spec.has_cell_state:
        raise invalid_arguments(
            f"{kind}: extensions.cell_clip applies to LSTM only, got {spec.name}")
    if (ext.dropout or ext.skip_input or ext.no_bias or ext.cell_clip) and spec.has_attention:
        raise unimplemented(f"{kind}: extensions are not implemented for {spec.name}")
    if descs["src_layer_desc"].data_type in _INT8:
        if ext.any:
            raise unimplemented(f"{kind}: rnn_extensions are not implemented for int8 RNNs")
        int8 = check_int8_types(descs, spec, prop, kind)
    else:
        int8 = None
        _check_data_types(descs, proj is not None, kind)
    dt = descs["src_layer_desc"].data_type
    return RnnShape(spec=spec, T=T, N=N, L=L, D=D, SLC=SLC, SIC=SIC, DHC=DHC, DIC=DIC, G=G,
                    Gb=Gb, direction=direction, with_src_iter=si is not None,
                    with_src_iter_c=sic is not None, with_dst_iter=di is not None,
                    with_dst_iter_c=dic is not None, peephole=peep is not None,
                    projection=proj is not None, activation=activation, alpha=float(alpha),
                    dt=dt, ext=ext, int8=int8)


_F32, _BF16, _F16 = data_type.f32, data_type.bf16, data_type.f16
# oneDNN's forward data-type configurations: (data, bias, cell state) per configuration name
_CONFIGS = {"f32": (_F32, (_F32,), (_F32,)), "bf16": (_BF16, (_F32, _BF16), (_F32, _BF16)),
            "f16": (_F16, (_F16, _F32), (_F16, _F32))}


def _check_data_types(descs: dict, projection: bool, kind: str) -> None:
    """Accept oneDNN's configurations: all f32; bf16 data with f32 (or bf16) bias and cell
    state; all f16 (f32 bias/cell state allowed); f32 peephole weights with bf16/f16 data.
    Computation is f32 in every case."""
    present = {n: md.data_type for n, md in descs.items() if _present(md)}
    data = present["src_layer_desc"]
    cfg = next((c for c in _CONFIGS.values() if c[0] == data), None)
    if cfg is None:
        raise unimplemented(
            f"{kind}: src_layer_desc data type {data.name} is not supported; expected f32, bf16, "
            f"f16, u8 or s8")
    for name, dt in present.items():
        # peephole weights: oneDNN's bf16/f16 LSTMs take them in f32 (the data type is
        # accepted too, as pydnnl always did)
        allowed = cfg[1] if name == "bias_desc" else cfg[2] if name in (
            "src_iter_c_desc", "dst_iter_c_desc") else (data, _F32) if name in (
            "attention_desc", "weights_peephole_desc") else (data,)
        if dt not in allowed:
            raise invalid_arguments(
                f"{kind}: with {data.name} src_layer_desc, {name} must be "
                f"{' or '.join(a.name for a in allowed)}, got {dt.name}")
    if projection and data != _F32:
        raise unimplemented(
            f"{kind}: LSTM with projection is implemented for f32 only, got {data.name}")


_U8, _S8 = data_type.u8, data_type.s8
_INT8 = (_U8, _S8)


def check_int8_types(descs: dict, spec: CellSpec, prop: prop_kind, kind: str) -> Int8Types:
    """oneDNN's int8 configurations (its ``check_data_type_consistency_fwd``): forward
    inference of LSTM (with projection, without peephole) or GRU; u8 (both cells) or s8 (LSTM
    only: oneDNN's CPU runs s8 LSTMs only) src_layer; s8 weights (and projection weights); f32
    bias and cell states; src_iter and dst_iter both of the data type or both f32; dst_layer of
    the data type or f32. Every other combination is ``unimplemented``, oneDNN's status for a
    data type configuration it lacks."""
    present = {n: md.data_type for n, md in descs.items() if _present(md)}
    data = present["src_layer_desc"]
    if prop != prop_kind.forward_inference:
        raise unimplemented(
            f"{kind}: {data.name} RNNs run forward_inference only (as in oneDNN), got "
            f"{prop.name}")
    if spec.name not in ("vanilla_lstm", "vanilla_gru"):
        raise unimplemented(
            f"{kind}: int8 is implemented for LSTM and GRU only (as in oneDNN), got {spec.name}")
    if data == _S8 and spec.name != "vanilla_lstm":
        raise unimplemented(
            f"{kind}: s8 src_layer_desc is supported for LSTM only (oneDNN runs GRU with u8 data), "
            f"got {spec.name}")
    if "weights_peephole_desc" in present:
        raise unimplemented(f"{kind}: int8 LSTM with peephole is not supported (nor in oneDNN)")
    allowed = {"weights_layer_desc": (_S8,), "weights_iter_desc": (_S8,),
               "weights_projection_desc": (_S8,), "bias_desc": (_F32,),
               "src_iter_c_desc": (_F32,), "dst_iter_c_desc": (_F32,),
               "src_iter_desc": (data, _F32), "dst_iter_desc": (data, _F32),
               "dst_layer_desc": (data, _F32), "src_layer_desc": (data,)}
    for name, dt in present.items():
        ok = allowed.get(name, ())
        if dt not in ok:
            raise unimplemented(
                f"{kind}: with {data.name} src_layer_desc, {name} must be "
                f"{' or '.join(a.name for a in ok)}, got {dt.name}")
    si, di = present.get("src_iter_desc"), present.get("dst_iter_desc")
    if si is not None and di is not None and si != di:
        raise unimplemented(
            f"{kind}: with {data.name} src_layer_desc, src_iter_desc and dst_iter_desc must "
            f"both be {data.name} or both f32, got {si.name} and {di.name}")
    state = si or di or data
    return Int8Types(data=data, src_iter=state, dst_iter=state,
                     dst_layer=present["dst_layer_desc"])
