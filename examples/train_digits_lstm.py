"""Train a many-to-one LSTM classifier on scikit-learn's 8x8 digits with pydnnl's LSTM
forward (forward_training) and backward primitives.

Each image is a sequence of T = 8 rows of 8 pixels. The LSTM runs on the device; the dense
head, softmax cross-entropy and the Adam optimizer are numpy. Only the last step's hidden state
feeds the classifier, so the loss gradient enters the backward pass through diff_dst_layer at
t = T - 1 with zeros at every other step (the pattern of the cuDNN many-to-one thread), or,
with --via dst_iter, through diff_dst_iter (the same state: dst_iter = dst_layer[T - 1] for one
left-to-right layer).

Run: python examples/train_digits_lstm.py [--device cpu|gpu] [--epochs 14] [--hidden 128]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import pydnnl as dnnl

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
T, F, CLASSES = 8, 8, 10


class LSTMLayer:
    """One left-to-right LSTM layer on a device: forward_training and backward primitives for a
    batch of N sequences, weights in the layouts the primitives chose (``any``)."""

    def __init__(self, eng, s, N, H, via_iter: bool):
        self.eng, self.s, self.N, self.H = eng, s, N, H
        L = D = 1
        G = 4
        md = lambda dims, t=tag.any: dnnl.memory.desc(dims, dt.f32, t)  # noqa: E731
        d = dnnl.rnn_direction.unidirectional_left2right
        self.fwd_descs = dict(
            src_layer_desc=md([T, N, F], tag.tnc), src_iter_desc=None, src_iter_c_desc=None,
            weights_layer_desc=md([L, D, F, G, H]), weights_iter_desc=md([L, D, H, G, H]),
            bias_desc=md([L, D, G, H], tag.ldgo), dst_layer_desc=md([T, N, H], tag.tnc),
            dst_iter_desc=md([L, D, N, H], tag.ldnc) if via_iter else None,
            dst_iter_c_desc=None)
        self.fpd = dnnl.lstm_forward.primitive_desc(eng, dnnl.prop_kind.forward_training, d,
                                                    **self.fwd_descs)
        diffs = {"diff_" + k: (md(v.get_dims()) if v is not None else None)
                 for k, v in self.fwd_descs.items()}
        diffs["diff_src_layer_desc"] = md([T, N, F], tag.tnc)
        # diff_weights_overwrite: each backward writes fresh gradients (no zeroing needed)
        self.bpd = dnnl.lstm_backward.primitive_desc(
            eng, dnnl.prop_kind.backward, d, **self.fwd_descs, **diffs, hint_fwd_pd=self.fpd,
            flags=dnnl.rnn_flags.diff_weights_overwrite)
        self.fwd = dnnl.lstm_forward(self.fpd)
        self.bwd = dnnl.lstm_backward(self.bpd)
        mem = lambda desc: dnnl.memory(desc, eng)  # noqa: E731
        p = self.fpd
        self.src, self.wl, self.wi, self.b = (mem(p.src_layer_desc()), mem(p.weights_layer_desc()),
                                              mem(p.weights_iter_desc()), mem(p.bias_desc()))
        self.dst, self.ws = mem(p.dst_layer_desc()), mem(p.workspace_desc())
        self.dst_iter = mem(p.dst_iter_desc()) if via_iter else None
        q = self.bpd
        self.diff_src = mem(q.diff_src_layer_desc())
        self.diff_dst = mem(q.diff_dst_layer_desc())
        self.diff_dst_iter = mem(q.diff_dst_iter_desc()) if via_iter else None
        self.dwl, self.dwi, self.db = (mem(q.diff_weights_layer_desc()),
                                       mem(q.diff_weights_iter_desc()), mem(q.diff_bias_desc()))
        self.fargs = {dnnl.ARG_SRC_LAYER: self.src, dnnl.ARG_WEIGHTS_LAYER: self.wl,
                      dnnl.ARG_WEIGHTS_ITER: self.wi, dnnl.ARG_BIAS: self.b,
                      dnnl.ARG_DST_LAYER: self.dst, dnnl.ARG_WORKSPACE: self.ws}
        if via_iter:
            self.fargs[dnnl.ARG_DST_ITER] = self.dst_iter
        self.bargs = dict(self.fargs)
        self.bargs.update({dnnl.ARG_DIFF_SRC_LAYER: self.diff_src,
                           dnnl.ARG_DIFF_DST_LAYER: self.diff_dst,
                           dnnl.ARG_DIFF_WEIGHTS_LAYER: self.dwl,
                           dnnl.ARG_DIFF_WEIGHTS_ITER: self.dwi, dnnl.ARG_DIFF_BIAS: self.db})
        if via_iter:
            self.bargs[dnnl.ARG_DIFF_DST_ITER] = self.diff_dst_iter
        self.via_iter = via_iter

    def set_weights(self, wl, wi, b) -> None:
        """Upload logical (ldigo / ldgo) numpy weights into the chosen layouts."""
        self.wl.write(wl)
        self.wi.write(wi)
        self.b.write(b)

    def forward(self, x_tnf: np.ndarray) -> np.ndarray:
        """The last step's hidden state [N, H]."""
        self.src.write(x_tnf)
        self.fwd.execute(self.s, self.fargs)
        self.s.wait()
        return self.dst.to_numpy()[-1]

    def backward(self, dh_last: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Gradients (ldigo / ldgo) of the weights, given d loss / d h_T [N, H]."""
        if self.via_iter:
            self.diff_dst.write(np.zeros((T, self.N, self.H), np.float32))
            self.diff_dst_iter.write(dh_last[None, None])
        else:
            dy = np.zeros((T, self.N, self.H), np.float32)
            dy[-1] = dh_last                      # many-to-one: only the last step has a loss
            self.diff_dst.write(dy)
        self.bwd.execute(self.s, self.bargs)      # reads the forward's workspace
        self.s.wait()
        return self.dwl.to_numpy(), self.dwi.to_numpy(), self.db.to_numpy()


class Adam:
    def __init__(self, params: list[np.ndarray], lr=1e-2, b1=0.9, b2=0.999, eps=1e-8):
        self.p, self.lr, self.b1, self.b2, self.eps = params, lr, b1, b2, eps
        self.m = [np.zeros_like(x) for x in params]
        self.v = [np.zeros_like(x) for x in params]
        self.t = 0

    def step(self, grads: list[np.ndarray]) -> None:
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


def main() -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--epochs", type=int, default=14)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--via", default="dst_layer", choices=["dst_layer", "dst_iter"],
                    help="where the loss gradient enters the LSTM backward pass")
    a = ap.parse_args()
    t_start = time.perf_counter()

    digits = load_digits()
    X = (digits.images / 16.0).astype(np.float32)          # [n, 8 rows, 8 pixels]
    X = (X - X.mean(0)) / (X.std(0) + 0.1)                 # per-pixel standardization
    Xtr, Xte, ytr, yte = train_test_split(X, digits.target, test_size=0.25, random_state=0,
                                          stratify=digits.target)
    eng = dnnl.engine(getattr(dnnl.engine.kind, a.device), 0)
    s = dnnl.stream(eng)
    print(f"device: {eng.info.name} [{eng.info.platform}]; {len(Xtr)} train / {len(Xte)} test "
          f"sequences of {T} steps x {F} features")

    H, B = a.hidden, a.batch
    train = LSTMLayer(eng, s, B, H, via_iter=a.via == "dst_iter")
    evals = {len(Xte): LSTMLayer(eng, s, len(Xte), H, via_iter=False)}

    rng = np.random.default_rng(a.seed)
    k = 1 / np.sqrt(H)
    wl = rng.uniform(-k, k, (1, 1, F, 4, H)).astype(np.float32)    # ldigo, gates i, f, c~, o
    wi = rng.uniform(-k, k, (1, 1, H, 4, H)).astype(np.float32)
    b = np.zeros((1, 1, 4, H), np.float32)
    b[0, 0, 1] = 1.0                                                 # forget-gate bias
    wd = rng.uniform(-k, k, (H, CLASSES)).astype(np.float32)
    bd = np.zeros(CLASSES, np.float32)
    opt = Adam([wl, wi, b, wd, bd], lr=a.lr)

    def accuracy(Xs, ys) -> float:
        layer = evals[len(Xs)]
        layer.set_weights(wl, wi, b)
        h = layer.forward(np.ascontiguousarray(Xs.transpose(1, 0, 2)))
        return float(np.mean((h @ wd + bd).argmax(1) == ys))

    test_accuracy = 0.0
    for epoch in range(1, a.epochs + 1):
        t0 = time.perf_counter()
        opt.lr = a.lr * (0.7 ** max(0, epoch - 8))          # decay over the last epochs
        order = rng.permutation(len(Xtr))
        losses, correct, seen = [], 0, 0
        for i in range(0, len(order) - B + 1, B):            # full batches only
            idx = order[i:i + B]
            x = np.ascontiguousarray(Xtr[idx].transpose(1, 0, 2))   # [T, N, F]
            y = ytr[idx]
            train.set_weights(wl, wi, b)
            h = train.forward(x)                                    # [N, H] = dst_layer[T-1]
            p = softmax(h @ wd + bd)
            losses.append(-np.mean(np.log(p[np.arange(B), y] + 1e-12)))
            correct += int(np.sum(p.argmax(1) == y))
            seen += B
            dz = p
            dz[np.arange(B), y] -= 1
            dz /= B                                                 # d mean CE / d logits
            gwd, gbd = h.T @ dz, dz.sum(0)
            gwl, gwi, gb = train.backward(dz @ wd.T)
            opt.step([gwl, gwi, gb, gwd, gbd])
        test_accuracy = accuracy(Xte, yte)
        print(f"epoch {epoch:2d}: loss {np.mean(losses):.4f}, train accuracy {correct / seen:.4f}, "
              f"test accuracy {test_accuracy:.4f} ({time.perf_counter() - t0:.1f} s)")

    print(f"final test accuracy: {test_accuracy:.4f} "
          f"(total {time.perf_counter() - t_start:.1f} s)")
    assert test_accuracy >= 0.95, f"test accuracy {test_accuracy:.4f} < 0.95"
    return test_accuracy


if __name__ == "__main__":
    main()
