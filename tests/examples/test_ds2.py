"""examples/ds2_speech.py: a tiny DeepSpeech2-like model (two convolutions with clipped ReLUs,
three bidirectional GRU or LSTM layers with per-utterance lengths, a per-frame inner product,
log-softmax) against a float64 numpy composition of pydnnl's reference primitives, batch norm
unfolded; one training step's gradients and update against the same composition's backward
pass; the loss over a few steps; the command line; PyTorch where it is installed."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference.conv import conv_backward_data, conv_backward_weights, conv_forward
from pydnnl.reference.eltwise import eltwise_backward, eltwise_forward
from pydnnl.reference.inner_product import (
    inner_product_backward_data,
    inner_product_backward_weights,
    inner_product_forward,
)
from pydnnl.reference.normalization import batch_norm_forward
from pydnnl.reference.rnn import rnn_backward, rnn_forward
from pydnnl.reference.softmax import softmax_backward, softmax_forward

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ds2_speech.py"


def _load():
    spec = importlib.util.spec_from_file_location("ds2_speech", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod        # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


ex = _load()
CFG = ex.SIZES["tiny"]          # 16 bins, 4 filters, 5x3/2x2 and 3x3/2x1 kernels, 8 hidden
MB, FRAMES = 3, 12              # 6 output frames; utterance lengths 12, 10, 9 -> 6, 5, 5
CELL_NAMES = {"gru": "lbr_gru", "lstm": "vanilla_lstm"}
CLIP = dnnl.algorithm.eltwise_clip_v2
# float32 against float64 through five layers (and back): forward errors measured 1.3e-7 of the
# largest value, gradients (back to conv1) at most 4.2e-7, on Intel's CPU runtime and PoCL;
# 1e-5 leaves room for other summation orders (GPU GEMM blockings) without hiding a wrong tap,
# gate or frame
RTOL = 1e-5


def _conv(cfg, i, t, w, b):
    k = (cfg.s1, cfg.p1) if i == 1 else (cfg.s2, cfg.p2)
    return conv_forward(t, w, b, list(k[0]), [0, 0], list(k[1]), list(k[1]))


def reference(cfg, cell, params, x, lengths, bn_unfolded=True):
    """float64 forward: ``(logp [T', N, 29], tape)``; batch norm applied after each
    convolution from its statistics (``bn_unfolded``) or the folded weights used as given."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    W = {k: v.astype(np.float64) for k, v in ex.folded(params).items()}
    tape = {"x": x.astype(np.float64)}
    t = tape["x"]
    for i in (1, 2):
        tape[f"in{i}"] = t
        if bn_unfolded:
            z = _conv(cfg, i, t, p[f"conv{i}.w"], None)
            z = batch_norm_forward(z, ex.BN_EPS, p[f"bn{i}.mean"], p[f"bn{i}.var"],
                                   p[f"bn{i}.gamma"], p[f"bn{i}.beta"])[0]
        else:
            z = _conv(cfg, i, t, W[f"conv{i}.w"], W[f"conv{i}.b"])
        t = tape[f"y{i}"] = eltwise_forward(CLIP, z, 0.0, ex.CLIP)
    N, C, F2, T2 = t.shape
    h = t.reshape(N, C * F2, T2).transpose(2, 0, 1)                       # [T', N, C F2]
    olens = cfg.out_frames(lengths)
    tape["caches"] = []
    for layer in range(cfg.layers):
        h, _, _, cache = rnn_forward(
            CELL_NAMES[cell], h, None, None, W[f"rnn{layer}.wl"], W[f"rnn{layer}.wi"],
            W[f"rnn{layer}.b"], direction="bidirectional_concat", seq_lengths=olens,
            dtype=np.float64)
        tape["caches"].append(cache)
    tape["h"] = rows = h.reshape(T2 * N, -1)
    z = inner_product_forward(rows, W["fc.w"], W["fc.b"])
    tape["logp"] = logp = softmax_forward(dnnl.algorithm.softmax_log, z, 1)
    return logp.reshape(T2, N, -1), tape


def reference_gradients(cfg, cell, params, x, lengths, target):
    """float64 gradients of ``loss = sum(target * logp)`` for every trainable tensor (folded
    convolutions), by the reference backward functions, and the loss."""
    W = {k: v.astype(np.float64) for k, v in ex.folded(params).items()}
    logp, tape = reference(cfg, cell, params, x, lengths, bn_unfolded=False)
    T2, N, _ = logp.shape
    g = {}
    dz = softmax_backward(dnnl.algorithm.softmax_log, target, tape["logp"], 1)
    g["fc.w"], g["fc.b"] = inner_product_backward_weights(tape["h"], dz)
    dh = inner_product_backward_data(dz, W["fc.w"]).reshape(T2, N, -1)
    for layer in reversed(range(cfg.layers)):
        r = rnn_backward(CELL_NAMES[cell], tape["caches"][layer], dh)
        g[f"rnn{layer}.wl"], g[f"rnn{layer}.wi"] = r["diff_weights_layer"], r["diff_weights_iter"]
        g[f"rnn{layer}.b"] = r["diff_bias"]
        dh = r["diff_src_layer"]
    y2 = tape["y2"]
    dy = dh.transpose(1, 2, 0).reshape(y2.shape)
    for i in (2, 1):
        y, t = tape[f"y{i}"], tape[f"in{i}"]
        dpre = eltwise_backward(ex.CLIP_BWD, dy, y, 0.0, ex.CLIP)
        k = (cfg.s1, cfg.p1) if i == 1 else (cfg.s2, cfg.p2)
        geo = (list(k[0]), [0, 0], list(k[1]), list(k[1]))
        g[f"conv{i}.w"], g[f"conv{i}.b"] = conv_backward_weights(t, dpre, W[f"conv{i}.w"].shape,
                                                                 *geo)
        if i == 2:
            dy = conv_backward_data(dpre, W["conv2.w"], t.shape, *geo)
    return g, float((target * tape["logp"]).sum())


@pytest.fixture(scope="module")
def batch():
    return ex.make_batch(CFG, MB, FRAMES, seed=3)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_inference_matches_reference(engine, stream, batch, cell):
    x, lengths, _ = batch
    assert len(set(CFG.out_frames(lengths).tolist())) > 1      # lengths really vary
    params = ex.random_params(CFG, cell, seed=1)
    net = ex.DS2(engine, CFG, cell, MB, FRAMES, lengths, params)
    net.set_batch(x)
    got = net.infer(stream)
    want, _ = reference(CFG, cell, params, x, lengths)
    valid = np.arange(net.T2)[:, None] < net.out_lengths[None, :]
    assert got.shape == want.shape == (net.T2, MB, ex.CLASSES)
    err = np.abs(got[valid] - want[valid]).max() / np.abs(want[valid]).max()
    assert err <= RTOL, err
    # the clip is active on both sides: some conv outputs are 0 and some above 0
    _, tape = reference(CFG, cell, params, x, lengths)
    assert (tape["y1"] == 0).any() and (tape["y1"] > 0).any()


@pytest.mark.sampled(every=2)
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_training_step_gradients_and_update(engine, stream, batch, cell):
    x, lengths, labels = batch
    params = ex.random_params(CFG, cell, seed=2)
    lr = 0.05
    net = ex.DS2(engine, CFG, cell, MB, FRAMES, lengths, params, train=True, optimizer="sgd",
                 lr=lr, momentum=0.0)
    net.set_batch(x, labels)
    net.step(stream)
    loss = net.loss(stream)
    target = net.targets(labels).astype(np.float64)
    assert np.all(target[~(np.arange(net.T2)[:, None] < net.out_lengths).reshape(-1)] == 0)
    want, want_loss = reference_gradients(CFG, cell, params, x, lengths, target)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    W0 = ex.folded(params)
    after = net.weights()
    assert set(want) == set(after) == set(net.dW)
    for k, ref in want.items():
        got = net.dW[k].to_numpy()
        assert np.abs(ref).max() > 0, k
        err = np.abs(got - ref).max() / np.abs(ref).max()
        assert err <= RTOL, (k, err)
        # plain SGD: w <- w - lr * g, with the device's own gradient
        np.testing.assert_allclose(after[k], W0[k] - np.float32(lr) * got, rtol=1e-6,
                                   atol=1e-7, err_msg=k)


def test_loss_decreases(engine, stream, batch):
    x, lengths, labels = batch
    params = ex.random_params(CFG, "gru", seed=4)
    net = ex.DS2(engine, CFG, "gru", MB, FRAMES, lengths, params, train=True, optimizer="adam",
                 lr=0.01)
    net.set_batch(x, labels)
    losses = []
    for _ in range(6):
        net.step(stream)
        losses.append(net.loss(stream))
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < 0.9 * losses[0], losses


@pytest.mark.parametrize("mode", ["infer", "train"])
def test_command_line(mode):
    if dnnl.engine.get_count(dnnl.engine.kind.cpu) == 0:  # the command's default device
        pytest.skip("no CPU OpenCL device on this machine")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(EXAMPLE), "--size", "tiny", "--mb", "2",
                          "--frames", "10", "--steps", "2", "--mode", mode],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "host<->device per" in out.stdout
    assert ("utterances/s" if mode == "infer" else "training steps/s") in out.stdout


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("cell,optimizer", [("gru", "sgd"), ("lstm", "sgd"), ("lstm", "adam")])
def test_against_torch(engine, stream, batch, cell, optimizer):
    torch = pytest.importorskip("torch")
    x, lengths, labels = batch
    params = ex.random_params(CFG, cell, seed=5)
    olens = torch.from_numpy(CFG.out_frames(lengths))
    # inference: batch norm as BatchNorm2d in eval mode in PyTorch, folded here
    net = ex.DS2(engine, CFG, cell, MB, FRAMES, lengths, params)
    net.set_batch(x)
    got = net.infer(stream)
    with torch.no_grad():
        want = ex.torch_model(CFG, cell, params, fold=False)(torch.from_numpy(x), olens).numpy()
    valid = np.arange(net.T2)[:, None] < net.out_lengths[None, :]
    assert ex.max_rel(got[valid], want[valid]) <= RTOL
    # three training steps with the same optimizer
    lr = 0.01 if optimizer == "adam" else 0.05
    net = ex.DS2(engine, CFG, cell, MB, FRAMES, lengths, params, train=True,
                 optimizer=optimizer, lr=lr)
    net.set_batch(x, labels)
    m = ex.torch_model(CFG, cell, params, fold=True).train()
    opt = (torch.optim.Adam(m.parameters(), lr=lr) if optimizer == "adam" else
           torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9, nesterov=True))
    target = torch.from_numpy(net.targets(labels).reshape(net.T2, MB, -1))
    for _ in range(3):
        net.step(stream)
        opt.zero_grad()
        loss = (m(torch.from_numpy(x), olens) * target).sum()
        loss.backward()
        opt.step()
        assert net.loss(stream) == pytest.approx(loss.item(), rel=RTOL)
    if optimizer == "adam":
        # Adam moves each weight by about lr * g / |g|: where a gradient is near zero (inputs
        # the clip zeroes) its last bits decide the step, so only the losses compare
        return
    theirs = ex.from_torch_state_dict(CFG, cell, {k: v.detach().numpy()
                                                  for k, v in m.state_dict().items()})
    ours = net.weights()
    for k in ours:
        assert ex.max_rel(ours[k], theirs[k]) <= RTOL, k
