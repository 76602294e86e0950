"""Train a many-to-one LSTM classifier on scikit-learn's 8x8 digits through pydnnl's MIOpen API
(``pydnnl.compat.miopen``), with sequences of different lengths.

Each image is a sequence of its rows (8 pixels per step). Every sample keeps a fixed, seeded
number of its rows, 6 to 8 (the bottom rows are dropped), so the sequences differ in length.
A batch is sorted by decreasing length, as MIOpen's per-step descriptors require: step t's
descriptor is [batch_t, 8] where batch_t counts the sequences longer than t, and x is the
packed [sum batch_t, 8] rows. Every training batch takes the same number of sequences of each
length (redrawn every epoch), so all batches share one set of descriptors: one MIOpen problem,
whose primitives are built once. ``hy`` is each sequence's hidden state after its own last
step; a linear classifier reads it. Backward: dy is zero except at the last valid step of each
sequence, where the classifier's gradient enters (MIOpen's many-to-one pattern); then
miopenRNNBackwardData and miopenRNNBackwardWeights, which writes the gradient in MIOpen's
packed weight layout. The head, the loss and Adam run in numpy on the host.

Run: python examples/miopen_many_to_one_digits.py [--epochs 12] [--hidden 128]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import pydnnl as dnnl
from pydnnl.compat import miopen

F, CLASSES = 8, 10
f32 = dnnl.memory.data_type.f32


def buffer(h, n: int) -> dnnl.memory:
    """A device buffer of n floats (MIOpen's device memory)."""
    return dnnl.memory(dnnl.memory.desc([max(n, 1)], f32, dnnl.memory.format_tag.a), h.engine)


def tensor(dims) -> miopen.miopenTensorDescriptor_t:
    d = miopen.miopenCreateTensorDescriptor()
    miopen.miopenSetTensorDescriptor(d, miopen.miopenFloat, len(dims), list(dims))
    return d


class Batch:
    """The MIOpen descriptors and buffers of batches with one profile of sequence lengths
    (sorted, decreasing); :meth:`load` puts a batch of that profile in."""

    def __init__(self, h, rnn, H, lengths):
        self.lengths = np.sort(lengths)[::-1]
        self.N, self.T = len(lengths), int(self.lengths[0])
        self.batches = [int((self.lengths > t).sum()) for t in range(self.T)]
        offsets = np.concatenate([[0], np.cumsum(self.batches)])[:-1]
        self.S = int(sum(self.batches))
        # the packed row of each sequence's last valid step
        self.last_row = offsets[self.lengths - 1] + np.arange(self.N)
        self.x_desc = [tensor([b, F]) for b in self.batches]
        self.y_desc = [tensor([b, H]) for b in self.batches]
        self.h_desc = tensor([1, self.N, H])
        self.x, self.dx = buffer(h, self.S * F), buffer(h, self.S * F)
        self.y = buffer(h, self.S * H)
        self.hy, self.dy = buffer(h, self.N * H), buffer(h, self.S * H)
        self.ws_bytes = miopen.miopenGetRNNWorkspaceSize(h, rnn, self.T, self.x_desc)
        self.rs_bytes = miopen.miopenGetRNNTrainingReserveSize(h, rnn, self.T, self.x_desc)
        self.ws, self.rs = buffer(h, self.ws_bytes // 4), buffer(h, self.rs_bytes // 4)

    def load(self, images, labels, lengths) -> None:
        order = np.argsort(-lengths, kind="stable")
        assert np.array_equal(lengths[order], self.lengths), "another length profile"
        images, self.labels = images[order], labels[order]
        # packed rows: step t's rows are the first batch_t sequences' row t
        self.x.write(np.concatenate([images[:b, t] for t, b in enumerate(self.batches)]).ravel())


class Model:
    """A one-layer MIOpen LSTM (weights in MIOpen's packed buffer) and a dense head."""

    def __init__(self, h, H: int, seed: int):
        self.h, self.H = h, H
        self.rnn = miopen.miopenCreateRNNDescriptor()
        miopen.miopenSetRNNDescriptor(self.rnn, H, 1, miopen.miopenRNNlinear,
                                      miopen.miopenRNNunidirection, miopen.miopenLSTM,
                                      miopen.miopenRNNwithBias, miopen.miopenRNNdefault,
                                      miopen.miopenFloat)
        x0 = tensor([1, F])
        n = miopen.miopenGetRNNParamsSize(h, self.rnn, x0, miopen.miopenFloat) // 4
        self.w_desc = miopen.miopenCreateTensorDescriptor()
        miopen.miopenGetRNNParamsDescriptor(h, self.rnn, x0, self.w_desc, miopen.miopenFloat)
        rng = np.random.default_rng(seed)
        k = 1 / np.sqrt(H)
        self.w = rng.uniform(-k, k, n).astype(np.float32)
        # MIOpen LSTM biases: paramID 1 is the forget gate; start it at 1 (input-GEMM bias)
        bias_desc = miopen.miopenCreateTensorDescriptor()
        off = miopen.miopenGetRNNLayerBiasOffset(self.rnn, 0, x0, 1, bias_desc)
        self.w[off:off + H] = 1.0
        for bid in (0, 2, 3, 4, 5, 6, 7):
            off = miopen.miopenGetRNNLayerBiasOffset(self.rnn, 0, x0, bid, bias_desc)
            self.w[off:off + H] = 0.0
        self.wd = rng.uniform(-k, k, (H, CLASSES)).astype(np.float32)
        self.bd = np.zeros(CLASSES, np.float32)
        self.w_dev, self.dw_dev = buffer(h, n), buffer(h, n)
        self.batches: dict = {}

    def batch(self, images, labels, lengths) -> Batch:
        """The descriptors and buffers of this length profile, holding this batch."""
        key = tuple(np.sort(lengths))
        if key not in self.batches:
            self.batches[key] = Batch(self.h, self.rnn, self.H, lengths)
        b = self.batches[key]
        b.load(images, labels, lengths)
        return b

    def last_hidden(self, b: Batch, training: bool) -> np.ndarray:
        """hy: each sequence's hidden state after its last valid step, [N, H]."""
        h = self.h
        self.w_dev.write(self.w)
        args = (h, self.rnn, b.T, b.x_desc, b.x, b.h_desc, None, b.h_desc, None, self.w_desc,
                self.w_dev, b.y_desc, b.y, b.h_desc, b.hy, b.h_desc, None, b.ws, b.ws_bytes)
        if training:
            miopen.miopenRNNForwardTraining(*args, b.rs, b.rs_bytes)
        else:
            miopen.miopenRNNForwardInference(*args)
        h.stream.wait()
        return b.hy.to_numpy().reshape(b.N, self.H)

    def lstm_gradient(self, b: Batch, dh_last: np.ndarray) -> np.ndarray:
        """d loss / d w in MIOpen's packing, given d loss / d hy (at each last valid step)."""
        h = self.h
        dy = np.zeros((b.S, self.H), np.float32)
        dy[b.last_row] = dh_last              # many-to-one: only the last valid step has a loss
        b.dy.write(dy.reshape(-1))
        miopen.miopenRNNBackwardData(h, self.rnn, b.T, b.y_desc, b.y, b.y_desc, b.dy, b.h_desc,
                                     None, b.h_desc, None, self.w_desc, self.w_dev, b.h_desc,
                                     None, b.h_desc, None, b.x_desc, b.dx, b.h_desc, None,
                                     b.h_desc, None, b.ws, b.ws_bytes, b.rs, b.rs_bytes)
        miopen.miopenRNNBackwardWeights(h, self.rnn, b.T, b.x_desc, b.x, b.h_desc, None,
                                        b.y_desc, b.y, self.w_desc, self.dw_dev, b.ws,
                                        b.ws_bytes, b.rs, b.rs_bytes)
        h.stream.wait()
        return self.dw_dev.to_numpy()


class Adam:
    def __init__(self, params, lr=1e-2, b1=0.9, b2=0.999, eps=1e-8):
        self.p, self.lr, self.b1, self.b2, self.eps = params, lr, b1, b2, eps
        self.m = [np.zeros_like(x) for x in params]
        self.v = [np.zeros_like(x) for x in params]
        self.t = 0

    def step(self, grads) -> None:
        self.t += 1
        c1, c2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for p, g, m, v in zip(self.p, grads, self.m, self.v):
            m *= self.b1
            m += (1 - self.b1) * g
            v *= self.b2
            v += (1 - self.b2) * g * g
            p -= (self.lr * (m / c1) / (np.sqrt(v / c2) + self.eps)).astype(p.dtype)


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def main(argv=None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    t_start = time.perf_counter()

    digits = load_digits()
    X = (digits.images / 16.0).astype(np.float32)          # [n, 8 rows, 8 pixels]
    X = (X - X.mean(0)) / (X.std(0) + 0.1)                 # per-pixel standardization
    lengths = np.random.default_rng(1).integers(6, 9, len(X))   # rows kept per sample
    Xtr, Xte, ytr, yte, ltr, lte = train_test_split(X, digits.target, lengths, test_size=0.25,
                                                    random_state=0, stratify=digits.target)
    h = miopen.miopenCreate()
    print(f"device: {h.engine.info.name}; {len(Xtr)} train / {len(Xte)} test sequences of "
          f"{lengths.min()} to {lengths.max()} steps x {F} features")

    model = Model(h, a.hidden, a.seed)
    opt = Adam([model.w, model.wd, model.bd], lr=a.lr)
    rng = np.random.default_rng(a.seed)
    n_batches = len(Xtr) // a.batch
    buckets = [np.flatnonzero(ltr == n) for n in np.unique(ltr)]
    per_batch = [len(b) // n_batches for b in buckets]     # sequences of each length per batch

    def epoch_batches() -> list[np.ndarray]:
        """Batches of one length profile: a new draw from each length's samples every epoch
        (the few samples left over differ from epoch to epoch)."""
        parts = [rng.permutation(b)[:k * n_batches].reshape(n_batches, k)
                 for b, k in zip(buckets, per_batch)]
        return [np.concatenate([p[i] for p in parts]) for i in range(n_batches)]

    def accuracy() -> float:
        b = model.batch(Xte, yte, lte)
        return float(np.mean((model.last_hidden(b, False) @ model.wd + model.bd).argmax(1)
                             == b.labels))

    test_accuracy = 0.0
    for epoch in range(1, a.epochs + 1):
        t0 = time.perf_counter()
        opt.lr = a.lr * (0.7 ** max(0, epoch - 8))         # decay over the last epochs
        losses, correct, seen = [], 0, 0
        for idx in epoch_batches():
            b = model.batch(Xtr[idx], ytr[idx], ltr[idx])
            hl = model.last_hidden(b, True)
            p = softmax(hl @ model.wd + model.bd)
            n = len(b.labels)
            losses.append(-np.mean(np.log(p[np.arange(n), b.labels] + 1e-12)))
            correct += int(np.sum(p.argmax(1) == b.labels))
            seen += n
            dz = p
            dz[np.arange(n), b.labels] -= 1
            dz /= n                                         # d mean cross-entropy / d logits
            gw = model.lstm_gradient(b, dz @ model.wd.T)
            opt.step([gw, hl.T @ dz, dz.sum(0)])
        test_accuracy = accuracy()
        print(f"epoch {epoch:2d}: loss {np.mean(losses):.4f}, train accuracy "
              f"{correct / seen:.4f}, test accuracy {test_accuracy:.4f} "
              f"({time.perf_counter() - t0:.1f} s)")
    print(f"final test accuracy: {test_accuracy:.4f} "
          f"(total {time.perf_counter() - t_start:.1f} s)")
    return test_accuracy


if __name__ == "__main__":
    acc = main()
    assert acc >= 0.95, f"test accuracy {acc:.4f} < 0.95"
