"""A DeepSpeech2-like acoustic model built from pydnnl primitives: inference or a training step,
every layer on the device.

The model (DS2's shapes, scaled by ``--size``), on a spectrogram batch ``[N, 1, freq, T]``:

1. two 2-D convolutions over (frequency, time), 41x11 stride 2x2 then 21x11 stride 2x1
   (``convolution_forward``), batch norm folded into their weights and bias, the clipped ReLU
   ``min(max(x, 0), 20)`` fused as an ``eltwise_clip_v2`` post-op. The second convolution
   writes its ``[N, C, F', T']`` output through strides that make the buffer the RNN's ``tnc``
   input ``[T', N, C * F']``: no reorder between the convolutions and the RNN;
2. three bidirectional GRU (linear-before-reset, PyTorch's and cuDNN's GRU) or LSTM layers
   (``lbr_gru_forward`` / ``lstm_forward``, ``bidirectional_concat``, one primitive per
   layer), each utterance running over its own number of frames (``rnn_extensions``'
   ``seq_lengths``: the convolution output length of the utterance);
3. an inner product per frame to the 29-letter alphabet (``[T' * N, 2H]`` rows of the last
   layer's output, no copy) and a log-softmax (``softmax_forward``, ``softmax_log``).

A training step (``--mode train``) adds the per-frame NLL loss of the log-probabilities masked
by the lengths (a ``matmul`` dot product with the target tensor ``-onehot / frames`` that is
zero at padded frames), its gradient (``softmax_backward``), the backward pass of every layer
(inner product, the three RNN layers, the clipped ReLUs with ``eltwise_backward`` reading the
convolutions' outputs, both convolutions) and one ``sgd_update`` (Nesterov momentum) or
``adam_update`` per parameter tensor. The host uploads the batch and reads the 4-byte loss.

Run: python examples/ds2_speech.py [--mode infer|train] [--device cpu|gpu] [--size small|full]
     [--cell gru|lstm] [--mb 8] [--frames 200] [--steps 10] [--optimizer sgd|adam] [--lr]
     [--compare-torch]
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

import pydnnl as dnnl

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
FWD_T, FWD_I = dnnl.prop_kind.forward_training, dnnl.prop_kind.forward_inference
BIDIR = dnnl.rnn_direction.bidirectional_concat
CLASSES = 29            # DS2's English alphabet: blank, space, apostrophe, 26 letters
CLIP = 20.0             # DS2's clipped ReLU: min(max(x, 0), 20)
BN_EPS = 1e-5
CLIP_ALG = dnnl.algorithm.eltwise_clip_v2                     # gradient on 0 < y < 20
CLIP_BWD = dnnl.algorithm.eltwise_clip_v2_use_dst_for_bwd     # the same, read from dst
# cell -> (forward, backward, gates, bias gates); "gru" is linear-before-reset, as PyTorch's
CELLS = {"gru": (dnnl.lbr_gru_forward, dnnl.lbr_gru_backward, 3, 4),
         "lstm": (dnnl.lstm_forward, dnnl.lstm_backward, 4, 4)}


@dataclass(frozen=True)
class Config:
    """Layer sizes; convolution padding is half the kernel (DS2's (20, 5) and (10, 5))."""

    freq: int                   # spectrogram frequency bins
    filters: int
    k1: tuple[int, int]         # (frequency, time)
    s1: tuple[int, int]
    k2: tuple[int, int]
    s2: tuple[int, int]
    hidden: int
    layers: int = 3
    classes: int = CLASSES

    @property
    def p1(self) -> tuple[int, int]:
        return self.k1[0] // 2, self.k1[1] // 2

    @property
    def p2(self) -> tuple[int, int]:
        return self.k2[0] // 2, self.k2[1] // 2

    def _out(self, i: int, axis: int) -> int:
        i = (i + 2 * self.p1[axis] - self.k1[axis]) // self.s1[axis] + 1
        return (i + 2 * self.p2[axis] - self.k2[axis]) // self.s2[axis] + 1

    @property
    def freq2(self) -> int:
        """Frequency bins after both convolutions."""
        return self._out(self.freq, 0)

    @property
    def rnn_in(self) -> int:
        return self.filters * self.freq2

    def out_frames(self, frames) -> np.ndarray:
        """Frames after both convolutions of ``frames`` input frames (an int or an array)."""
        return self._out(np.asarray(frames), 1)


SIZES = {
    # DS2 (Amodei et al. 2016): 161 bins of a 20 ms window, 32 filters; 800 hidden units
    "full": Config(161, 32, (41, 11), (2, 2), (21, 11), (2, 1), 800),
    "small": Config(81, 16, (41, 11), (2, 2), (21, 11), (2, 1), 256),
    "tiny": Config(16, 4, (5, 3), (2, 2), (3, 3), (2, 1), 8),   # tests
}


# ---------------------------------------------------------------------------------------------
# synthetic data and parameters
# ---------------------------------------------------------------------------------------------
def make_batch(cfg: Config, mb: int, frames: int, seed: int = 0):
    """``(spectrograms [mb, 1, freq, frames], lengths [mb], labels [T', mb])``: utterances of
    random lengths (the first one full length), zero after their end, whose frames carry a
    frequency band that depends on the frame's label (so that the labels can be learned)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(max(1, frames // 2), frames + 1, mb)
    lengths[0] = frames
    T2 = int(cfg.out_frames(frames))
    labels = np.zeros((T2, mb), np.int64)
    for n in range(mb):                  # letters lasting 2 to 6 output frames
        t = 0
        while t < T2:
            d = int(rng.integers(2, 7))
            labels[t:t + d, n] = rng.integers(0, cfg.classes)
            t += d
    stride = frames / T2                 # input frames per output frame
    lab_in = labels[np.minimum((np.arange(frames) / stride).astype(int), T2 - 1)]  # [T, mb]
    centre = (lab_in + 0.5) * cfg.freq / cfg.classes
    f = np.arange(cfg.freq)[:, None, None]
    x = np.exp(-0.5 * ((f - centre[None]) / max(1.0, cfg.freq / (2 * cfg.classes))) ** 2)
    x = x + 0.3 * rng.standard_normal(x.shape)                   # [freq, T, mb]
    x[:, np.arange(frames)[:, None] >= lengths[None, :]] = 0.0   # padding
    return (np.ascontiguousarray(x.transpose(2, 0, 1)[:, None], np.float32),
            lengths.astype(np.int64), labels)


def random_params(cfg: Config, cell: str, seed: int = 0) -> dict:
    """Seeded float32 parameters in oneDNN's logical layouts: convolutions ``oihw`` with their
    batch norms (statistics away from the identity so the folding is exercised), RNN layer l
    ``rnn{l}.wl`` / ``.wi`` (``ldigo``, D = 2) and ``.b`` (``ldgo``), ``fc.w`` ``[29, 2H]``."""
    rng = np.random.default_rng(seed)
    u = lambda k, shape: rng.uniform(-k, k, shape).astype(np.float32)  # noqa: E731
    _, _, G, Gb = CELLS[cell]
    H, p = cfg.hidden, {}
    for i, (ic, k) in enumerate(((1, cfg.k1), (cfg.filters, cfg.k2)), 1):
        p[f"conv{i}.w"] = u(np.sqrt(6.0 / (ic * k[0] * k[1])), (cfg.filters, ic, *k))
        p[f"bn{i}.gamma"] = rng.uniform(0.5, 1.5, cfg.filters).astype(np.float32)
        p[f"bn{i}.beta"] = rng.normal(0.0, 0.1, cfg.filters).astype(np.float32)
        p[f"bn{i}.mean"] = rng.normal(0.0, 0.1, cfg.filters).astype(np.float32)
        p[f"bn{i}.var"] = rng.uniform(0.5, 2.0, cfg.filters).astype(np.float32)
    k = 1.0 / np.sqrt(H)
    for layer in range(cfg.layers):
        slc = cfg.rnn_in if layer == 0 else 2 * H
        p[f"rnn{layer}.wl"] = u(k, (1, 2, slc, G, H))
        p[f"rnn{layer}.wi"] = u(k, (1, 2, H, G, H))
        p[f"rnn{layer}.b"] = u(k, (1, 2, Gb, H))
    p["fc.w"] = u(1.0 / np.sqrt(2 * H), (cfg.classes, 2 * H))
    p["fc.b"] = u(1.0 / np.sqrt(2 * H), (cfg.classes,))
    return p


def folded(params: dict) -> dict:
    """The trainable tensors: convolutions with their inference batch norm folded in
    (``gamma (conv(x) - mean) / sqrt(var + eps) + beta`` is a convolution with per-channel
    scaled weights and a bias), in float64 then float32, and the other parameters as given."""
    out = {k: v for k, v in params.items() if k.split(".")[0][:-1] not in ("conv", "bn")}
    for i in (1, 2):
        scale = params[f"bn{i}.gamma"] / np.sqrt(params[f"bn{i}.var"].astype(np.float64) + BN_EPS)
        out[f"conv{i}.w"] = (params[f"conv{i}.w"] * scale[:, None, None, None]).astype(np.float32)
        out[f"conv{i}.b"] = (params[f"bn{i}.beta"] - params[f"bn{i}.mean"] * scale).astype(
            np.float32)
    return out


# ---------------------------------------------------------------------------------------------
# the model on pydnnl primitives
# ---------------------------------------------------------------------------------------------
def md(dims, t=tag.any) -> dnnl.memory.desc:
    return dnnl.memory.desc(list(dims), dt.f32, t)


def view(desc: dnnl.memory.desc, eng, mem: dnnl.memory) -> dnnl.memory:
    """Another desc over ``mem``'s buffer (no copy)."""
    return dnnl.memory(desc, eng, mem.get_data_handle())


def clip_attr() -> dnnl.primitive_attr:
    ops = dnnl.post_ops()
    ops.append_eltwise(CLIP_ALG, 0.0, CLIP)
    attr = dnnl.primitive_attr()
    attr.set_post_ops(ops)
    return attr


class Transfers:
    """Bytes moved between host and device."""

    def __init__(self):
        self.up = self.down = 0

    def write(self, mem: dnnl.memory, array: np.ndarray) -> None:
        mem.write(array)
        self.up += mem.get_desc().get_size()

    def read(self, mem: dnnl.memory) -> np.ndarray:
        self.down += mem.get_desc().get_size()
        return mem.to_numpy()


class DS2:
    """Every primitive and memory of the model for one batch shape and one set of utterance
    lengths (RNN sequence lengths are part of a primitive descriptor, as in cuDNN).

    ``train=False``: :meth:`infer` returns the log-probabilities ``[T', N, 29]``.
    ``train=True``: :meth:`step` runs forward, loss, backward and the optimizer update on the
    labels given to :meth:`set_batch` and accumulates the loss on the device (:meth:`loss`).
    """

    def __init__(self, eng, cfg: Config, cell: str, mb: int, frames: int, lengths, params: dict,
                 train: bool = False, optimizer: str = "sgd", lr: float = 1e-3,
                 momentum: float = 0.9, find: bool = False):
        self.eng, self.cfg, self.cell, self.train = eng, cfg, cell, train
        self.find, self.solvers = find, []
        self.N, self.T = mb, frames
        self.T2 = T2 = int(cfg.out_frames(frames))
        self.lengths = np.asarray(lengths, np.int64)
        self.out_lengths = cfg.out_frames(self.lengths).astype(np.int64)
        self.io = Transfers()
        mem = lambda d: dnnl.memory(d, eng)  # noqa: E731
        prop = FWD_T if train else FWD_I
        N, C, H, F2 = mb, cfg.filters, cfg.hidden, cfg.freq2
        W = folded(params)
        self.fwd, self.bwd, self.W, self.dW = [], [], {}, {}

        # --- convolutions: conv2 writes [N, C, F2, T2] with tnc strides ([T2, N, C * F2])
        x_md = md([N, 1, cfg.freq, frames], tag.nchw)
        c1 = self._conv(dnnl.convolution_forward, eng, prop, src_desc=x_md,
                        weights_desc=md(W["conv1.w"].shape), bias_desc=md([C], tag.x),
                        dst_desc=md([N, C, *self._conv1_out()]), strides=list(cfg.s1),
                        padding_l=list(cfg.p1), padding_r=list(cfg.p1), attr=clip_attr())
        y2_md = md([N, C, F2, T2], [C * F2, F2, 1, N * C * F2])
        c2 = self._conv(dnnl.convolution_forward, eng, prop, src_desc=c1.dst_desc(),
                        weights_desc=md(W["conv2.w"].shape), bias_desc=md([C], tag.x),
                        dst_desc=y2_md, strides=list(cfg.s2), padding_l=list(cfg.p2),
                        padding_r=list(cfg.p2), attr=clip_attr())
        self.x, self.y1, self.y2 = mem(c1.src_desc()), mem(c1.dst_desc()), mem(c2.dst_desc())
        for name, pd in (("conv1", c1), ("conv2", c2)):
            self.W[name + ".w"] = dnnl.memory(pd.weights_desc(), eng, W[name + ".w"])
            self.W[name + ".b"] = dnnl.memory(pd.bias_desc(), eng, W[name + ".b"])
        self.fwd += [(dnnl.convolution_forward(c1), {
                         dnnl.ARG_SRC: self.x, dnnl.ARG_WEIGHTS: self.W["conv1.w"],
                         dnnl.ARG_BIAS: self.W["conv1.b"], dnnl.ARG_DST: self.y1}),
                     (dnnl.convolution_forward(c2), {
                         dnnl.ARG_SRC: self.y1, dnnl.ARG_WEIGHTS: self.W["conv2.w"],
                         dnnl.ARG_BIAS: self.W["conv2.b"], dnnl.ARG_DST: self.y2})]
        self.conv_pds = (c1, c2)

        # --- bidirectional RNN layers over each utterance's own frames
        fwd_cls, bwd_cls, G, Gb = CELLS[cell]
        ext = dnnl.rnn_extensions(seq_lengths=tuple(int(v) for v in self.out_lengths))
        self.rnn_pds, self.rnn_args, src = [], [], view(md([T2, N, cfg.rnn_in], tag.tnc), eng,
                                                        self.y2)
        for layer in range(cfg.layers):
            slc = cfg.rnn_in if layer == 0 else 2 * H
            descs = dict(src_layer_desc=md([T2, N, slc], tag.tnc), src_iter_desc=None,
                         weights_layer_desc=md([1, 2, slc, G, H]),
                         weights_iter_desc=md([1, 2, H, G, H]), bias_desc=md([1, 2, Gb, H]),
                         dst_layer_desc=md([T2, N, 2 * H], tag.tnc), dst_iter_desc=None)
            if cell == "lstm":
                descs.update(src_iter_c_desc=None, dst_iter_c_desc=None)
            pd = fwd_cls.primitive_desc(eng, prop, BIDIR, **descs, extensions=ext)
            name = f"rnn{layer}"
            for k, d in (("wl", pd.weights_layer_desc()), ("wi", pd.weights_iter_desc()),
                         ("b", pd.bias_desc())):
                self.W[f"{name}.{k}"] = dnnl.memory(d, eng, W[f"{name}.{k}"])
            args = {dnnl.ARG_SRC_LAYER: src, dnnl.ARG_WEIGHTS_LAYER: self.W[name + ".wl"],
                    dnnl.ARG_WEIGHTS_ITER: self.W[name + ".wi"],
                    dnnl.ARG_BIAS: self.W[name + ".b"],
                    dnnl.ARG_DST_LAYER: mem(pd.dst_layer_desc())}
            if train:
                args[dnnl.ARG_WORKSPACE] = mem(pd.workspace_desc())
            self.fwd.append((fwd_cls(pd), args))
            self.rnn_pds.append((pd, descs))
            self.rnn_args.append(args)
            src = args[dnnl.ARG_DST_LAYER]
        self.h = src

        # --- per-frame inner product to the alphabet and log-softmax, over [T2 * N] rows
        rows = T2 * N
        h_md, z_md = md([rows, 2 * H], tag.ab), md([rows, cfg.classes], tag.ab)
        ip = dnnl.inner_product_forward.primitive_desc(
            eng, prop, h_md, md([cfg.classes, 2 * H]), md([cfg.classes], tag.a), z_md)
        self.W["fc.w"] = dnnl.memory(ip.weights_desc(), eng, W["fc.w"])
        self.W["fc.b"] = dnnl.memory(ip.query_md(dnnl.query.exec_arg_md, dnnl.ARG_BIAS), eng,
                                     W["fc.b"])
        smf = dnnl.softmax_forward.primitive_desc(eng, prop, dnnl.algorithm.softmax_log, z_md,
                                                  z_md, 1)
        self.h_rows = view(h_md, eng, self.h)
        self.logits, self.logp = mem(z_md), mem(z_md)
        self.fwd += [(dnnl.inner_product_forward(ip), {
                         dnnl.ARG_SRC: self.h_rows, dnnl.ARG_WEIGHTS: self.W["fc.w"],
                         dnnl.ARG_BIAS: self.W["fc.b"], dnnl.ARG_DST: self.logits}),
                     (dnnl.softmax_forward(smf), {dnnl.ARG_SRC: self.logits,
                                                  dnnl.ARG_DST: self.logp})]
        self.setup_bytes = sum(m.get_desc().get_size() for m in self.W.values())
        if train:
            self._build_training(ip, smf, h_md, z_md, optimizer, lr, momentum)

    def _conv(self, cls, *head, **kw):
        """``cls.primitive_desc(*head, convolution_auto, **kw)``; with ``find``, MIOpen-style
        Find runs first and stores the fastest solver, which ``convolution_auto`` then takes."""
        auto = dnnl.algorithm.convolution_auto
        try:
            if self.find:
                cls.find(*head, **kw)
            pd = cls.primitive_desc(*head, auto, **kw)
        except ValueError as e:
            # a pydnnl bug (docs/ds2.md): im2col_gemm's backward-weights plan undersizes a
            # scratch slot for conv1 from mb 4 on; implicit GEMM is the faster solver there
            if "scratch slot" not in str(e):
                raise
            pd = cls.primitive_desc(*head, auto, solver="implicit_gemm", **kw)
        self.solvers.append((cls.__name__, pd.impl_info_str()))
        return pd

    def _conv1_out(self) -> tuple[int, int]:
        cfg = self.cfg
        return tuple((i + 2 * p - k) // s + 1 for i, k, s, p in
                     zip((cfg.freq, self.T), cfg.k1, cfg.s1, cfg.p1))

    def _build_training(self, ip, smf, h_md, z_md, optimizer, lr, momentum) -> None:
        eng, cfg, N, T2 = self.eng, self.cfg, self.N, self.T2
        mem = lambda d: dnnl.memory(d, eng)  # noqa: E731
        rows = T2 * N
        # loss = <target, logp>, target = -onehot / frames at valid frames, 0 at padding
        self.target = mem(z_md)
        self.loss_mem = mem(md([1, 1], tag.ab))
        accumulate = dnnl.primitive_attr()
        po = dnnl.post_ops()
        po.append_sum(1.0)
        accumulate.set_post_ops(po)
        flat = rows * cfg.classes
        largs = (md([1, flat], tag.ab), md([flat, 1], tag.ab), md([1, 1], tag.ab))
        self.loss_set = dnnl.matmul(dnnl.matmul.primitive_desc(eng, *largs))
        self.loss_add = dnnl.matmul(dnnl.matmul.primitive_desc(eng, *largs, attr=accumulate))
        self.loss_args = {dnnl.ARG_SRC: view(largs[0], eng, self.target),
                          dnnl.ARG_WEIGHTS: view(largs[1], eng, self.logp),
                          dnnl.ARG_DST: self.loss_mem}

        # log-softmax backward: (softmax - onehot) / frames at valid frames, 0 at padding
        smb = dnnl.softmax_backward.primitive_desc(eng, dnnl.algorithm.softmax_log, z_md, z_md,
                                                   z_md, 1, smf)
        self.dlogits = mem(z_md)
        self.bwd.append((dnnl.softmax_backward(smb), {
            dnnl.ARG_DST: self.logp, dnnl.ARG_DIFF_DST: self.target,
            dnnl.ARG_DIFF_SRC: self.dlogits}))
        bias_md = ip.query_md(dnnl.query.exec_arg_md, dnnl.ARG_BIAS)
        ipw = dnnl.inner_product_backward_weights.primitive_desc(
            eng, h_md, ip.weights_desc(), bias_md, z_md, ip)
        ipd = dnnl.inner_product_backward_data.primitive_desc(eng, h_md, ip.weights_desc(), z_md,
                                                              ip)
        self.dW["fc.w"] = mem(ipw.diff_weights_desc())
        self.dW["fc.b"] = mem(ipw.query_md(dnnl.query.exec_arg_md, dnnl.ARG_DIFF_BIAS))
        dh = mem(md([T2, N, 2 * cfg.hidden], tag.tnc))     # d loss / d last layer's output
        self.bwd += [(dnnl.inner_product_backward_weights(ipw), {
                          dnnl.ARG_SRC: self.h_rows, dnnl.ARG_DIFF_DST: self.dlogits,
                          dnnl.ARG_DIFF_WEIGHTS: self.dW["fc.w"],
                          dnnl.ARG_DIFF_BIAS: self.dW["fc.b"]}),
                     (dnnl.inner_product_backward_data(ipd), {
                         dnnl.ARG_WEIGHTS: self.W["fc.w"], dnnl.ARG_DIFF_DST: self.dlogits,
                         dnnl.ARG_DIFF_SRC: view(h_md, eng, dh)})]

        # RNN layers, top to bottom; diff_src_layer of layer l is diff_dst_layer of l - 1
        _, bwd_cls, _, _ = CELLS[self.cell]
        for layer in reversed(range(cfg.layers)):
            fpd, descs = self.rnn_pds[layer]
            diffs = {"diff_" + k: (None if v is None else md(v.get_dims(), (
                tag.tnc if "layer_desc" in k and "weights" not in k else tag.any)))
                for k, v in descs.items()}
            bpd = bwd_cls.primitive_desc(eng, dnnl.prop_kind.backward, BIDIR, **descs, **diffs,
                                         hint_fwd_pd=fpd,
                                         flags=dnnl.rnn_flags.diff_weights_overwrite)
            name = f"rnn{layer}"
            self.dW[name + ".wl"] = mem(bpd.diff_weights_layer_desc())
            self.dW[name + ".wi"] = mem(bpd.diff_weights_iter_desc())
            self.dW[name + ".b"] = mem(bpd.diff_bias_desc())
            dsrc = mem(bpd.diff_src_layer_desc())
            args = dict(self.rnn_args[layer])
            args.update({dnnl.ARG_DIFF_DST_LAYER: dh, dnnl.ARG_DIFF_SRC_LAYER: dsrc,
                         dnnl.ARG_DIFF_WEIGHTS_LAYER: self.dW[name + ".wl"],
                         dnnl.ARG_DIFF_WEIGHTS_ITER: self.dW[name + ".wi"],
                         dnnl.ARG_DIFF_BIAS: self.dW[name + ".b"]})
            self.bwd.append((bwd_cls(bpd), args))
            dh = dsrc

        # clipped ReLUs (from their outputs, in place) and the convolutions
        c1, c2 = self.conv_pds
        dy2 = view(c2.dst_desc(), eng, dh)                 # tnc = conv2's strided dst
        dy1 = mem(c1.dst_desc())
        for y, dy in ((self.y2, dy2), (self.y1, dy1)):
            d = y.get_desc()
            hint = dnnl.eltwise_forward.primitive_desc(eng, FWD_T, CLIP_BWD, d, d, 0.0, CLIP)
            pd = dnnl.eltwise_backward.primitive_desc(eng, CLIP_BWD, d, d, d, 0.0, CLIP, hint)
            step = (dnnl.eltwise_backward(pd), {dnnl.ARG_DST: y, dnnl.ARG_DIFF_DST: dy,
                                                dnnl.ARG_DIFF_SRC: dy})
            if y is self.y2:
                self.bwd.append(step)
            else:
                clip1 = step
        conv_bwd = []
        for name, pd, src, dy in (("conv2", c2, self.y1, dy2), ("conv1", c1, self.x, dy1)):
            geo = dict(strides=pd.get_strides(), padding_l=pd.get_padding_l(),
                       padding_r=pd.get_padding_r(), hint_fwd_pd=pd)
            bw = self._conv(dnnl.convolution_backward_weights, eng, src_desc=pd.src_desc(),
                            diff_weights_desc=md(pd.weights_desc().get_dims()),
                            diff_bias_desc=md([cfg.filters], tag.x),
                            diff_dst_desc=pd.dst_desc(), **geo)
            self.dW[name + ".w"] = mem(bw.diff_weights_desc())
            self.dW[name + ".b"] = mem(bw.diff_bias_desc())
            conv_bwd.append((dnnl.convolution_backward_weights(bw), {
                dnnl.ARG_SRC: src, dnnl.ARG_DIFF_DST: dy, dnnl.ARG_DIFF_WEIGHTS: self.dW[
                    name + ".w"], dnnl.ARG_DIFF_BIAS: self.dW[name + ".b"]}))
            if name == "conv2":                # conv1's input gradient is not needed
                bd = self._conv(dnnl.convolution_backward_data, eng,
                                diff_src_desc=c1.dst_desc(), weights_desc=pd.weights_desc(),
                                diff_dst_desc=pd.dst_desc(), **geo)
                conv_bwd += [(dnnl.convolution_backward_data(bd), {
                    dnnl.ARG_DIFF_DST: dy, dnnl.ARG_WEIGHTS: self.W["conv2.w"],
                    dnnl.ARG_DIFF_SRC: dy1}), clip1]
        self.bwd += conv_bwd
        self.optimizer = Optimizer(eng, [(self.W[k], self.dW[k]) for k in self.W], optimizer,
                                   lr, momentum)
        self.setup_bytes += self.optimizer.setup_bytes

    # -- running ------------------------------------------------------------------------------
    def set_batch(self, x: np.ndarray, labels: np.ndarray | None = None) -> None:
        """Upload spectrograms ``[N, 1, freq, T]`` and (training) frame labels ``[T', N]``."""
        self.io.write(self.x, x)
        if labels is not None:
            self.io.write(self.target, self.targets(labels))

    def targets(self, labels: np.ndarray) -> np.ndarray:
        """``[T' * N, 29]``: ``-onehot / frames`` at valid frames (d mean NLL / d logp)."""
        valid = np.arange(self.T2)[:, None] < self.out_lengths[None, :]      # [T', N]
        t = np.zeros((self.T2, self.N, self.cfg.classes), np.float32)
        t[valid, labels[valid]] = -1.0 / valid.sum()
        return t.reshape(-1, self.cfg.classes)

    def enqueue_forward(self, s) -> None:
        for prim, args in self.fwd:
            prim.execute(s, args)

    def infer(self, s) -> np.ndarray:
        """Log-probabilities ``[T', N, 29]`` of the uploaded batch (at padded frames the RNN
        output is 0, so those rows are log_softmax(fc.b))."""
        self.enqueue_forward(s)
        s.wait()
        return self.io.read(self.logp).reshape(self.T2, self.N, -1)

    def step(self, s, first_since_read: bool = True) -> None:
        """Enqueue one training step; the loss is set (or added, ``first_since_read=False``)
        into the device accumulator."""
        self.enqueue_forward(s)
        (self.loss_set if first_since_read else self.loss_add).execute(s, self.loss_args)
        for prim, args in self.bwd:
            prim.execute(s, args)
        self.optimizer.execute(s)

    def profile(self, s, reps: int = 3) -> list[tuple[str, float]]:
        """Median milliseconds of each primitive of a pass (a training step's when training),
        each followed by a wait; the optimizer updates are summed into one entry."""
        seq = list(self.fwd)
        if self.train:
            seq += [(self.loss_set, self.loss_args)] + self.bwd
            if self.optimizer.tick is not None:
                seq.append(self.optimizer.tick)
            seq += self.optimizer.steps
        times = np.zeros((reps, len(seq)))
        for r in range(reps):
            for i, (prim, args) in enumerate(seq):
                t0 = time.perf_counter()
                prim.execute(s, args)
                s.wait()
                times[r, i] = (time.perf_counter() - t0) * 1e3
        out, seen = {}, {}
        n_fwd = len(self.fwd)
        for i, (prim, _) in enumerate(seq):
            name = type(prim).__name__
            if name in ("sgd_update", "adam_update") or (i == n_fwd + len(self.bwd) + 1
                                                         and name == "eltwise_forward"):
                label = "optimizer updates"
            else:
                seen[name] = seen.get(name, 0) + 1
                label = f"{name} #{seen[name]}"
            out[label] = out.get(label, 0.0) + float(np.median(times[:, i]))
        return list(out.items())

    def loss(self, s) -> float:
        s.wait()
        return float(self.io.read(self.loss_mem)[0, 0])

    def weights(self) -> dict:
        """The current trainable tensors, in oneDNN's logical layouts (for tests)."""
        return {k: m.to_numpy() for k, m in self.W.items()}


class Optimizer:
    """One ``sgd_update`` (Nesterov momentum) or ``adam_update`` per (parameter, gradient)
    pair; Adam's step counter lives on the device and is advanced by an ``eltwise_linear``."""

    def __init__(self, eng, pairs, kind: str, lr: float, momentum: float):
        self.steps, self.setup_bytes, self.tick = [], 0, None
        state_args = (dnnl.ARG_OPTIMIZER_STATE_0, dnnl.ARG_OPTIMIZER_STATE_1)

        def zeros(d):
            self.setup_bytes += d.get_size()
            return dnnl.memory(d, eng, np.zeros(d.get_dims(), np.float32))

        if kind == "adam":
            first = dnnl.adam_update.primitive_desc(eng, pairs[0][0].get_desc(), lr)
            self.counter = zeros(first.step_desc())
            tick = dnnl.eltwise_forward.primitive_desc(
                eng, FWD_I, dnnl.algorithm.eltwise_linear, first.step_desc(),
                first.step_desc(), 1.0, 1.0)
            self.tick = (dnnl.eltwise_forward(tick), {dnnl.ARG_SRC: self.counter,
                                                      dnnl.ARG_DST: self.counter})
        for p, g in pairs:
            if kind == "adam":
                pd = dnnl.adam_update.primitive_desc(eng, p.get_desc(), lr,
                                                     diff_src_desc=g.get_desc())
                prim, n_states = dnnl.adam_update(pd), 2
            else:
                pd = dnnl.sgd_update.primitive_desc(eng, p.get_desc(), lr, momentum, 0.0,
                                                    momentum > 0, diff_src_desc=g.get_desc())
                prim, n_states = dnnl.sgd_update(pd), int(momentum > 0)
            args = {dnnl.ARG_SRC: p, dnnl.ARG_DIFF_SRC: g}
            for i in range(n_states):
                args[state_args[i]] = zeros(pd.state_desc(i))
            if kind == "adam":
                args[dnnl.ARG_OPTIMIZER_STEP] = self.counter
            self.steps.append((prim, args))

    def execute(self, s) -> None:
        if self.tick is not None:
            self.tick[0].execute(s, self.tick[1])
        for prim, args in self.steps:
            prim.execute(s, args)


# ---------------------------------------------------------------------------------------------
# the same model in PyTorch
# ---------------------------------------------------------------------------------------------
def torch_model(cfg: Config, cell: str, params: dict, fold: bool):
    """An ``nn.Module`` ``(x [N, 1, freq, T], out_lengths) -> logp [T', N, 29]`` with the
    same weights: batch norm as ``BatchNorm2d`` in eval mode, or folded (``fold``: the model
    :class:`DS2` trains); ``nn.GRU`` / ``nn.LSTM`` over a ``PackedSequence``."""
    import torch
    from torch import nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            F, H = cfg.filters, cfg.hidden
            self.conv = nn.Sequential(
                nn.Conv2d(1, F, cfg.k1, cfg.s1, cfg.p1, bias=fold),
                *(() if fold else (nn.BatchNorm2d(F, eps=BN_EPS),)), nn.Hardtanh(0.0, CLIP),
                nn.Conv2d(F, F, cfg.k2, cfg.s2, cfg.p2, bias=fold),
                *(() if fold else (nn.BatchNorm2d(F, eps=BN_EPS),)), nn.Hardtanh(0.0, CLIP))
            self.rnn = (nn.GRU if cell == "gru" else nn.LSTM)(
                cfg.rnn_in, H, num_layers=cfg.layers, bidirectional=True)
            self.fc = nn.Linear(2 * H, cfg.classes)

        def forward(self, x, out_lengths):
            y = self.conv(x)                                         # [N, C, F', T']
            N, C, F2, T2 = y.shape
            y = y.reshape(N, C * F2, T2).permute(2, 0, 1)            # [T', N, C F']
            packed = nn.utils.rnn.pack_padded_sequence(y, out_lengths, enforce_sorted=False)
            h, _ = nn.utils.rnn.pad_packed_sequence(self.rnn(packed)[0], total_length=T2)
            return torch.log_softmax(self.fc(h), dim=-1)

    m = Model()
    sd = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in
          torch_state_dict(cfg, cell, params, fold).items()}
    m.load_state_dict(sd)
    # PyTorch's RNNs have two biases where oneDNN has one (all gates of an LSTM, u and r of
    # a GRU): training both would move their sum twice as fast, so only bias_ih trains there
    mask = torch.zeros(CELLS[cell][2], cfg.hidden)
    if cell == "gru":
        mask[2] = 1.0                         # the candidate's recurrent bias is oneDNN's u'
    for name, p in m.rnn.named_parameters():
        if name.startswith("bias_hh"):
            p.register_hook(lambda g: g * mask.to(g.device).reshape(-1))
    return m.eval()


def torch_state_dict(cfg: Config, cell: str, params: dict, fold: bool) -> dict:
    """PyTorch parameter names and layouts of :func:`random_params`' tensors."""
    W = folded(params) if fold else params
    sd = {}
    for i, idx in ((1, 0), (2, 2 if fold else 3)):
        bn = idx + 1
        sd[f"conv.{idx}.weight"] = W[f"conv{i}.w"]
        if fold:
            sd[f"conv.{idx}.bias"] = W[f"conv{i}.b"]
        else:
            for ours, theirs in (("gamma", "weight"), ("beta", "bias"), ("mean", "running_mean"),
                                 ("var", "running_var")):
                sd[f"conv.{bn}.{theirs}"] = W[f"bn{i}.{ours}"]
            sd[f"conv.{bn}.num_batches_tracked"] = np.array(0)
    # gates: oneDNN lbr_gru (u, r, o) -> PyTorch (r, z, n); LSTM (i, f, c~, o) is PyTorch's
    order = [1, 0, 2] if cell == "gru" else [0, 1, 2, 3]

    def rows(w):                              # [in, G, H] -> [G H, in]
        return np.transpose(w[:, order], (1, 2, 0)).reshape(-1, w.shape[0])

    for layer in range(cfg.layers):
        wl, wi, b = (W[f"rnn{layer}.{k}"] for k in ("wl", "wi", "b"))
        for d, sfx in ((0, ""), (1, "_reverse")):
            sd[f"rnn.weight_ih_l{layer}{sfx}"] = rows(wl[0, d])
            sd[f"rnn.weight_hh_l{layer}{sfx}"] = rows(wi[0, d])
            bh = np.zeros_like(b[0, d, :len(order)])
            if cell == "gru":
                bh[2] = b[0, d, 3]            # the recurrent candidate bias, inside r * (...)
            sd[f"rnn.bias_ih_l{layer}{sfx}"] = b[0, d, order].reshape(-1)
            sd[f"rnn.bias_hh_l{layer}{sfx}"] = bh.reshape(-1)
    sd["fc.weight"], sd["fc.bias"] = W["fc.w"], W["fc.b"]
    return sd


def from_torch_state_dict(cfg: Config, cell: str, sd: dict) -> dict:
    """The inverse of :func:`torch_state_dict` for a folded model: our trainable tensors."""
    order = [1, 0, 2] if cell == "gru" else [0, 1, 2, 3]
    G = len(order)
    out = {"conv1.w": sd["conv.0.weight"], "conv1.b": sd["conv.0.bias"],
           "conv2.w": sd["conv.2.weight"], "conv2.b": sd["conv.2.bias"],
           "fc.w": sd["fc.weight"], "fc.b": sd["fc.bias"]}
    inv = np.argsort(order)

    def ldigo(w):                             # [G H, in] -> [in, G, H], our gate order
        return np.transpose(w.reshape(G, -1, w.shape[1]), (2, 0, 1))[:, inv]

    for layer in range(cfg.layers):
        wls, wis, bs = [], [], []
        for sfx in ("", "_reverse"):
            wls.append(ldigo(sd[f"rnn.weight_ih_l{layer}{sfx}"]))
            wis.append(ldigo(sd[f"rnn.weight_hh_l{layer}{sfx}"]))
            bi = sd[f"rnn.bias_ih_l{layer}{sfx}"].reshape(G, -1)
            bh = sd[f"rnn.bias_hh_l{layer}{sfx}"].reshape(G, -1)
            if cell == "gru":    # u and r take both biases, o the input one, u' the recurrent
                b = np.stack([bi[1] + bh[1], bi[0] + bh[0], bi[2], bh[2]])
            else:
                b = (bi + bh)[inv]
            bs.append(b)
        out[f"rnn{layer}.wl"] = np.stack(wls)[None]
        out[f"rnn{layer}.wi"] = np.stack(wis)[None]
        out[f"rnn{layer}.b"] = np.stack(bs)[None]
    return {k: np.asarray(v, np.float32) for k, v in out.items()}


def torch_device(kind: str):
    import torch

    if kind == "gpu":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        return torch.device("cuda")
    return torch.device("cpu")


def max_rel(a: np.ndarray, b: np.ndarray) -> float:
    """Largest difference relative to the largest magnitude of ``b``."""
    return float(np.abs(np.asarray(a, np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------
def timed(fn, steps: int) -> tuple[float, float]:
    """(median, best) seconds of ``steps`` calls of ``fn``: the median resists the other jobs
    of a shared machine, the best shows an undisturbed call."""
    times = []
    for _ in range(max(1, steps)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), min(times)


def rate(per_call: int, t: tuple[float, float], unit: str) -> str:
    """``per_call / seconds`` as 'median (best) unit/s, ms per call'."""
    return (f"{per_call / t[0]:.2f} (best {per_call / t[1]:.2f}) {unit}/s, median "
            f"{t[0] * 1e3:.1f} ms")


def torch_timings(device: str, fn, steps: int):
    """``[(label, seconds per call)]`` of ``fn`` in PyTorch: on the CPU with one thread and
    with its default thread count (OpenMP's threads spin: on a busy machine one thread can
    beat all of them), on CUDA synchronized after each call."""
    import torch

    if device == "gpu":
        def call():
            fn()
            torch.cuda.synchronize()
        return [("PyTorch CUDA", timed(call, steps))]
    out, default = [], torch.get_num_threads()
    for n in sorted({1, default}):
        torch.set_num_threads(n)
        out.append((f"PyTorch CPU ({n} thread{'s' * (n > 1)})", timed(fn, steps)))
    torch.set_num_threads(default)
    return out


def print_profile(a, net: DS2, s) -> None:
    if a.profile:
        rows = net.profile(s)
        total = sum(ms for _, ms in rows)
        print("convolution solvers: " + ", ".join(f"{n} {i}" for n, i in net.solvers))
        print(f"per primitive (ms, a wait after each; sum {total:.1f}):")
        for label, ms in rows:
            print(f"  {label:36s} {ms:8.2f}")


def run_infer(a, cfg, eng, s, params, x, lengths) -> None:
    net = DS2(eng, cfg, a.cell, a.mb, a.frames, lengths, params, find=a.find)
    out = {}

    def batch():                      # upload, forward, read the log-probabilities
        net.set_batch(x)
        out["logp"] = net.infer(s)

    batch()                                                   # warm-up
    io0 = (net.io.up, net.io.down)
    sec = timed(batch, a.steps)
    up, down = ((v - w) / a.steps for v, w in zip((net.io.up, net.io.down), io0))
    print(f"pydnnl: {rate(a.mb, sec, 'utterances')} per batch of {a.mb} ({a.steps} batches)")
    print(f"host<->device per batch: {up:.0f} B up (spectrograms), {down:.0f} B down "
          f"(log-probabilities [{net.T2}, {a.mb}, {cfg.classes}]); once: "
          f"{net.setup_bytes} B of weights up")
    if a.compare_torch:
        compare_infer(a, cfg, params, net, sec, x, out["logp"])
    print_profile(a, net, s)


def compare_infer(a, cfg, params, net, sec, x, logp) -> None:
    """PyTorch's speed and output on the same batch."""
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: no comparison")
        return
    dev = torch_device(a.device)
    m = torch_model(cfg, a.cell, params, fold=False).to(dev)
    olens = torch.from_numpy(net.out_lengths)
    out = {}

    def run():
        with torch.no_grad():
            out["ref"] = m(torch.from_numpy(x).to(dev), olens).cpu().numpy()

    run()                                                     # warm-up
    for label, tsec in torch_timings(a.device, run, a.steps):
        print(f"{label}: {rate(a.mb, tsec, 'utterances')}; pydnnl/PyTorch (medians) "
              f"{tsec[0] / sec[0]:.2f}x")
    valid = np.arange(net.T2)[:, None] < net.out_lengths[None, :]
    print(f"max relative error of the log-probabilities at valid frames: "
          f"{max_rel(logp[valid], out['ref'][valid]):.2e}")


def run_train(a, cfg, eng, s, params, x, lengths, labels) -> None:
    net = DS2(eng, cfg, a.cell, a.mb, a.frames, lengths, params, train=True,
              optimizer=a.optimizer, lr=a.lr, momentum=a.momentum, find=a.find)
    losses = []

    def step():                       # upload the batch, train, read the loss
        net.set_batch(x, labels)
        net.step(s)
        losses.append(net.loss(s))

    step()                                                    # warm-up: step 1 is not timed
    io0 = (net.io.up, net.io.down)
    sec = timed(step, a.steps - 1) if a.steps > 1 else (float("nan"),) * 2
    print("pydnnl losses: " + " ".join(f"{v:.4f}" for v in losses))
    up, down = ((v - w) / max(1, a.steps - 1) for v, w in zip((net.io.up, net.io.down), io0))
    print(f"pydnnl: {rate(1, sec, 'training steps')} (steps 2 to {a.steps})")
    print(f"host<->device per step: {up:.0f} B up (spectrograms and targets), {down:.0f} B down "
          f"(the loss); once: {net.setup_bytes} B of weights and optimizer state up")
    if a.compare_torch:
        compare_train(a, cfg, params, net, sec, x, labels, losses)
    print_profile(a, net, s)      # runs steps too: after the comparison of the weights


def compare_train(a, cfg, params, net, sec, x, labels, losses) -> None:
    """PyTorch's speed, losses and weights after the same steps."""
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: no comparison")
        return
    dev = torch_device(a.device)
    target = torch.from_numpy(net.targets(labels).reshape(net.T2, a.mb, -1))
    olens = torch.from_numpy(net.out_lengths)

    def train_torch():
        """A fresh model trained for the same steps: (losses, s/step after the first, model)."""
        m = torch_model(cfg, a.cell, params, fold=True).to(dev).train()
        opt = (torch.optim.Adam(m.parameters(), lr=a.lr) if a.optimizer == "adam" else
               torch.optim.SGD(m.parameters(), lr=a.lr, momentum=a.momentum,
                               nesterov=a.momentum > 0))
        tl = []

        def tstep():
            opt.zero_grad()
            loss = (m(torch.from_numpy(x).to(dev), olens) * target.to(dev)).sum()
            loss.backward()
            opt.step()
            tl.append(loss.item())          # synchronizes, as reading our loss does

        tstep()
        return tl, timed(tstep, a.steps - 1) if a.steps > 1 else (float("nan"),) * 2, m

    if a.device == "gpu":
        runs = [("PyTorch CUDA", train_torch())]
    else:
        runs, default = [], torch.get_num_threads()
        for n in sorted({1, default}):
            torch.set_num_threads(n)
            runs.append((f"PyTorch CPU ({n} thread{'s' * (n > 1)})", train_torch()))
        torch.set_num_threads(default)
    tl, _, m = runs[-1][1]
    print("PyTorch losses: " + " ".join(f"{v:.4f}" for v in tl))
    for label, (_, tsec, _) in runs:
        print(f"{label}: {rate(1, tsec, 'training steps')}; pydnnl/PyTorch (medians) "
              f"{tsec[0] / sec[0]:.2f}x")
    sd = {k: v.detach().cpu().numpy() for k, v in m.state_dict().items()}
    theirs, ours = from_torch_state_dict(cfg, a.cell, sd), net.weights()
    err = max(max_rel(ours[k], theirs[k]) for k in ours)
    print(f"max relative error: losses {max_rel(losses, np.array(tl)):.2e}, weights after "
          f"{a.steps} steps {err:.2e}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", default="infer", choices=["infer", "train"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--size", default="small", choices=list(SIZES))
    ap.add_argument("--cell", default="gru", choices=list(CELLS))
    ap.add_argument("--mb", type=int, default=8)
    ap.add_argument("--frames", type=int, default=200, help="input frames (10 ms each in DS2)")
    ap.add_argument("--steps", type=int, default=10, help="batches (infer) or training steps")
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])
    ap.add_argument("--lr", type=float, default=None,
                    help="learning rate (default: 0.05 for SGD, 1e-3 for Adam)")
    ap.add_argument("--momentum", type=float, default=0.9, help="SGD's (Nesterov) momentum")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--find", action="store_true",
                    help="time every convolution solver first (stored in the perf database)")
    ap.add_argument("--profile", action="store_true",
                    help="print each primitive's time (a wait after each; not the timed runs)")
    ap.add_argument("--compare-torch", action="store_true",
                    help="run the same model with the same weights in PyTorch too")
    a = ap.parse_args(argv)
    if a.lr is None:
        a.lr = 1e-3 if a.optimizer == "adam" else 0.05
    cfg = SIZES[a.size]
    eng = dnnl.engine(getattr(dnnl.engine.kind, a.device), 0)
    s = dnnl.stream(eng)
    x, lengths, labels = make_batch(cfg, a.mb, a.frames, a.seed)
    params = random_params(cfg, a.cell, a.seed)
    print(f"device: {eng.info.name} [{eng.info.platform}]; DS2 {a.size} ({a.cell}, "
          f"{cfg.filters} filters, {cfg.layers} x 2 x {cfg.hidden} hidden), mb {a.mb}, "
          f"{cfg.freq} x {a.frames} spectrograms -> {int(cfg.out_frames(a.frames))} frames; "
          f"lengths {lengths.tolist()}")
    if a.mode == "infer":
        run_infer(a, cfg, eng, s, params, x, lengths)
    else:
        run_train(a, cfg, eng, s, params, x, lengths, labels)


if __name__ == "__main__":
    main()
