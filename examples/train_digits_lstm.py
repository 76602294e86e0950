"""Train a many-to-one LSTM classifier on scikit-learn's 8x8 digits, every training step on the
device: pydnnl primitives from the input batch to the Adam update.

Each image is a sequence of T = 8 rows of 8 pixels. One training step is:

1. LSTM forward (``forward_training``); the last step's hidden state h_T feeds the head;
2. inner-product head forward (10 logits), log-softmax (``softmax_forward``, ``softmax_log``);
3. the NLL loss as a dot product (``matmul`` [1, B*10] x [B*10, 1]) of the log-probabilities
   with the batch's target tensor ``-onehot / B``, added on the device to a loss accumulator
   (a ``sum`` post-op) that the host reads every ``--log-every`` steps;
4. log-softmax backward with ``diff_dst = -onehot / B`` (d loss / d log-probabilities): its
   ``diff_src = diff_dst - exp(logp) * sum(diff_dst)`` is ``(softmax - onehot) / B``;
5. inner-product backward weights and data, then LSTM backward: the head's gradient enters
   through ``diff_dst_layer`` at t = T - 1 (zeros at every other step), or, with
   ``--via dst_iter``, through ``diff_dst_iter`` (the same state for one left-to-right layer);
6. the step counter advanced on the device (``eltwise_linear`` in place) and one fused
   ``adam_update`` per parameter tensor.

The host uploads each epoch's shuffled inputs and targets in one write each (a step reads its
batch through sub-buffers, so steps are enqueued back to back) and reads the loss; the
weights, gradients and optimizer state never leave the device. Once per epoch the test set
(uploaded once) runs through an inference LSTM and head sharing the weights, and its logits
are read back.

Run: python examples/train_digits_lstm.py [--device cpu|gpu] [--epochs 14] [--hidden 128]
     [--log-every N] [--via dst_layer|dst_iter] [--compare-torch]
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
FWD_T, FWD_I = dnnl.prop_kind.forward_training, dnnl.prop_kind.forward_inference
L2R = dnnl.rnn_direction.unidirectional_left2right


def md(dims, t=tag.any):
    return dnnl.memory.desc(dims, dt.f32, t)


class Transfers:
    """Bytes the example moves between host and device."""

    def __init__(self):
        self.up = self.down = 0

    def new(self, desc: dnnl.memory.desc, eng, array: np.ndarray) -> dnnl.memory:
        """A memory holding ``array``."""
        self.up += desc.get_size()
        return dnnl.memory(desc, eng, array)

    def write(self, mem: dnnl.memory, array: np.ndarray) -> None:
        mem.write(array)
        self.up += mem.get_desc().get_size()

    def read(self, mem: dnnl.memory) -> np.ndarray:
        self.down += mem.get_desc().get_size()
        return mem.to_numpy()


IO = Transfers()


def lstm_descs(N: int, H: int, with_dst_iter: bool) -> dict:
    return dict(src_layer_desc=md([T, N, F], tag.tnc), src_iter_desc=None, src_iter_c_desc=None,
                weights_layer_desc=md([1, 1, F, 4, H]), weights_iter_desc=md([1, 1, H, 4, H]),
                bias_desc=md([1, 1, 4, H], tag.ldgo), dst_layer_desc=md([T, N, H], tag.tnc),
                dst_iter_desc=md([1, 1, N, H], tag.ldnc) if with_dst_iter else None,
                dst_iter_c_desc=None)


def last_step(layer_desc: dnnl.memory.desc) -> dnnl.memory.desc:
    """[N, H] view of time step T - 1 of a tnc [T, N, H] desc."""
    _, N, H = layer_desc.get_dims()
    return layer_desc.submemory_desc([1, N, H], [T - 1, 0, 0]).reshape([N, H])


def view(desc: dnnl.memory.desc, eng, mem: dnnl.memory) -> dnnl.memory:
    """Another desc over ``mem``'s buffer (no copy)."""
    return dnnl.memory(desc, eng, mem.get_data_handle())


def bias_desc(pd, arg=dnnl.ARG_BIAS) -> dnnl.memory.desc:
    """The (diff) bias desc of an inner-product pd (it has no ``bias_desc()`` query)."""
    return pd.query_md(dnnl.query.exec_arg_md, arg)


class Head:
    """Inner-product head forward for N rows reading h_T from ``h_desc``."""

    def __init__(self, eng, N: int, H: int, h_desc, prop):
        self.pd = dnnl.inner_product_forward.primitive_desc(
            eng, prop, h_desc, md([CLASSES, H]), md([CLASSES], tag.a), md([N, CLASSES], tag.ab))
        self.prim = dnnl.inner_product_forward(self.pd)


class Model:
    """The weights on the device, in the layouts the training primitives chose."""

    def __init__(self, eng, fpd, head: Head, init: dict):
        W = {"wl": fpd.weights_layer_desc(), "wi": fpd.weights_iter_desc(),
             "b": fpd.bias_desc(), "wd": head.pd.weights_desc(), "bd": bias_desc(head.pd)}
        self.mem = {k: IO.new(d, eng, init[k]) for k, d in W.items()}


class Shared:
    """Memories of ``model`` seen through other descs: the same memory where the descs agree,
    else a copy refreshed by a device reorder (``refresh``)."""

    def __init__(self, eng, model: Model, want: dict):
        self.mem, self.copies = {}, []
        for k, d in want.items():
            src = model.mem[k]
            if d == src.get_desc():
                self.mem[k] = src
            else:
                dst = self.mem[k] = dnnl.memory(d, eng)
                self.copies.append((dnnl.reorder(src, dst), src, dst))

    def refresh(self, s) -> None:
        for prim, src, dst in self.copies:
            prim.execute(s, src, dst)


class DeviceAdam:
    """One ``adam_update`` per (parameter, gradient) pair, a step counter on the device."""

    def __init__(self, eng, pairs: list[tuple[dnnl.memory, dnnl.memory]], lr: float):
        self.eng, self.pairs, self.lr = eng, pairs, None
        first = dnnl.adam_update.primitive_desc(eng, pairs[0][0].get_desc(), lr)
        self.step = IO.new(first.step_desc(), eng, np.zeros(1, np.float32))
        tick = dnnl.eltwise_forward.primitive_desc(eng, FWD_I, dnnl.algorithm.eltwise_linear,
                                                   first.step_desc(), first.step_desc(), 1.0, 1.0)
        self.tick = dnnl.eltwise_forward(tick)                        # t <- t + 1, in place
        self.states = []
        for p, g in pairs:
            pd = dnnl.adam_update.primitive_desc(eng, p.get_desc(), lr,
                                                 diff_src_desc=g.get_desc())
            zeros = np.zeros(p.get_desc().get_dims(), np.float32)
            self.states.append([IO.new(pd.state_desc(i), eng, zeros) for i in (0, 1)])
        self.set_lr(lr)

    def set_lr(self, lr: float) -> None:
        """New primitives for a new learning rate (kernel arguments: nothing is compiled)."""
        if lr == self.lr:
            return
        self.lr, self.prims = lr, []
        for (p, g), (m, v) in zip(self.pairs, self.states):
            pd = dnnl.adam_update.primitive_desc(self.eng, p.get_desc(), lr,
                                                 diff_src_desc=g.get_desc())
            self.prims.append((dnnl.adam_update(pd), {
                dnnl.ARG_SRC: p, dnnl.ARG_DIFF_SRC: g, dnnl.ARG_OPTIMIZER_STATE_0: m,
                dnnl.ARG_OPTIMIZER_STATE_1: v, dnnl.ARG_OPTIMIZER_STEP: self.step}))

    def execute(self, s) -> None:
        self.tick.execute(s, {dnnl.ARG_SRC: self.step, dnnl.ARG_DST: self.step})
        for prim, args in self.prims:
            prim.execute(s, args)


class EpochBatches:
    """One epoch's shuffled inputs and targets, uploaded in one write each; batch j is a
    sub-buffer of those uploads that the training step reads through ``use``."""

    def __init__(self, eng, train: "TrainStep", steps: int):
        align = max(eng.device.mem_base_addr_align // 8, 4)   # sub-buffer origins, bytes
        self.train, self.steps = train, steps
        self.descs = (train.x.get_desc(), train.target.get_desc())
        self.pitch = [-(-d.get_size() // align) * align for d in self.descs]
        self.mem = [dnnl.memory(md([steps * p // 4], tag.a), eng) for p in self.pitch]
        self.batches = [[m.get_data_handle().get_sub_region(j * p, d.get_size())
                         for m, p, d in zip(self.mem, self.pitch, self.descs)]
                        for j in range(steps)]

    def upload(self, io: Transfers, xs: np.ndarray, targets: np.ndarray) -> None:
        """``xs`` [steps, T, B, F] and ``targets`` [steps, B, CLASSES] (``x`` and ``target`` are
        dense row-major, tnc and ab); the device must be done with the previous epoch."""
        for mem, pitch, a in zip(self.mem, self.pitch, (xs, targets)):
            rows = np.zeros((self.steps, pitch // 4), np.float32)
            rows[:, :a[0].size] = a.reshape(self.steps, -1)
            io.write(mem, rows.reshape(-1))

    def use(self, j: int) -> None:
        self.train.use_batch(*self.batches[j])


class TrainStep:
    """Every primitive and memory of one training step on a batch of B sequences."""

    def __init__(self, eng, B: int, H: int, via_iter: bool, init: dict, lr: float):
        mem = lambda d: dnnl.memory(d, eng)  # noqa: E731
        self.B = B
        descs = lstm_descs(B, H, via_iter)
        self.fpd = dnnl.lstm_forward.primitive_desc(eng, FWD_T, L2R, **descs)
        diffs = {"diff_" + k: (md(v.get_dims()) if v is not None else None)
                 for k, v in descs.items()}
        diffs["diff_src_layer_desc"] = md([T, B, F], tag.tnc)
        # diff_weights_overwrite: each backward writes fresh gradients (no zeroing needed)
        self.bpd = dnnl.lstm_backward.primitive_desc(
            eng, dnnl.prop_kind.backward, L2R, **descs, **diffs, hint_fwd_pd=self.fpd,
            flags=dnnl.rnn_flags.diff_weights_overwrite)
        f, b = self.fpd, self.bpd
        self.x = mem(f.src_layer_desc())
        self.dst, self.ws = mem(f.dst_layer_desc()), mem(f.workspace_desc())
        self.diff_dst = IO.new(b.diff_dst_layer_desc(), eng,
                               np.zeros((T, B, H), np.float32))  # only t = T-1 is written
        if via_iter:
            self.dst_iter, self.diff_dst_iter = mem(f.dst_iter_desc()), mem(b.diff_dst_iter_desc())
            h_desc = md([B, H], tag.ab)                     # dst_iter [1, 1, B, H] as [B, H]
            h, dh = view(h_desc, eng, self.dst_iter), view(h_desc, eng, self.diff_dst_iter)
        else:
            h_desc = last_step(f.dst_layer_desc())
            h = view(h_desc, eng, self.dst)
            dh = view(last_step(b.diff_dst_layer_desc()), eng, self.diff_dst)

        self.head = Head(eng, B, H, h_desc, FWD_T)
        self.model = Model(eng, f, self.head, init)
        W = self.model.mem
        logits_md = md([B, CLASSES], tag.ab)
        smf = dnnl.softmax_forward.primitive_desc(eng, FWD_T, dnnl.algorithm.softmax_log,
                                                  logits_md, logits_md, 1)
        smb = dnnl.softmax_backward.primitive_desc(eng, dnnl.algorithm.softmax_log, logits_md,
                                                   logits_md, logits_md, 1, smf)
        ipd = self.head.pd
        bwd_w = dnnl.inner_product_backward_weights.primitive_desc(
            eng, h_desc, ipd.weights_desc(), bias_desc(ipd), ipd.dst_desc(), ipd)
        bwd_d = dnnl.inner_product_backward_data.primitive_desc(
            eng, h_desc, ipd.weights_desc(), ipd.dst_desc(), ipd)
        self.logits, self.logp, self.dlogits = mem(logits_md), mem(logits_md), mem(logits_md)
        self.target = mem(logits_md)                        # -onehot / B, per batch
        self.loss = mem(md([1, 1], tag.ab))                 # summed over steps between reads

        # loss = <target, logp>: overwritten at the first step after a read, then accumulated
        flat = B * CLASSES
        accumulate = dnnl.primitive_attr()
        po = dnnl.post_ops()
        po.append_sum(1.0)
        accumulate.set_post_ops(po)
        loss_args = (md([1, flat], tag.ab), md([flat, 1], tag.ab), md([1, 1], tag.ab))
        self.loss_set = dnnl.matmul(dnnl.matmul.primitive_desc(eng, *loss_args))
        self.loss_add = dnnl.matmul(dnnl.matmul.primitive_desc(eng, *loss_args,
                                                               attr=accumulate))
        self.loss_margs = {dnnl.ARG_SRC: view(loss_args[0], eng, self.target),
                           dnnl.ARG_WEIGHTS: view(loss_args[1], eng, self.logp),
                           dnnl.ARG_DST: self.loss}

        self.dW = {"wl": mem(b.diff_weights_layer_desc()), "wi": mem(b.diff_weights_iter_desc()),
                   "b": mem(b.diff_bias_desc()), "wd": mem(bwd_w.diff_weights_desc()),
                   "bd": mem(bias_desc(bwd_w, dnnl.ARG_DIFF_BIAS))}
        fargs = {dnnl.ARG_SRC_LAYER: self.x, dnnl.ARG_WEIGHTS_LAYER: W["wl"],
                 dnnl.ARG_WEIGHTS_ITER: W["wi"], dnnl.ARG_BIAS: W["b"],
                 dnnl.ARG_DST_LAYER: self.dst, dnnl.ARG_WORKSPACE: self.ws}
        if via_iter:
            fargs[dnnl.ARG_DST_ITER] = self.dst_iter
        bargs = dict(fargs)
        bargs.update({dnnl.ARG_DIFF_SRC_LAYER: mem(b.diff_src_layer_desc()),
                      dnnl.ARG_DIFF_DST_LAYER: self.diff_dst,
                      dnnl.ARG_DIFF_WEIGHTS_LAYER: self.dW["wl"],
                      dnnl.ARG_DIFF_WEIGHTS_ITER: self.dW["wi"],
                      dnnl.ARG_DIFF_BIAS: self.dW["b"]})
        if via_iter:
            bargs[dnnl.ARG_DIFF_DST_ITER] = self.diff_dst_iter
        # the step up to the loss, then the backward pass (the loss matmul goes in between)
        self.forward = [
            (dnnl.lstm_forward(f), fargs),
            (self.head.prim, {dnnl.ARG_SRC: h, dnnl.ARG_WEIGHTS: W["wd"], dnnl.ARG_BIAS: W["bd"],
                              dnnl.ARG_DST: self.logits}),
            (dnnl.softmax_forward(smf), {dnnl.ARG_SRC: self.logits, dnnl.ARG_DST: self.logp})]
        self.backward = [
            (dnnl.softmax_backward(smb), {dnnl.ARG_DST: self.logp, dnnl.ARG_DIFF_DST: self.target,
                                          dnnl.ARG_DIFF_SRC: self.dlogits}),
            (dnnl.inner_product_backward_weights(bwd_w), {
                dnnl.ARG_SRC: h, dnnl.ARG_DIFF_DST: self.dlogits,
                dnnl.ARG_DIFF_WEIGHTS: self.dW["wd"], dnnl.ARG_DIFF_BIAS: self.dW["bd"]}),
            (dnnl.inner_product_backward_data(bwd_d), {
                dnnl.ARG_WEIGHTS: W["wd"], dnnl.ARG_DIFF_DST: self.dlogits,
                dnnl.ARG_DIFF_SRC: dh}),
            (dnnl.lstm_backward(b), bargs)]      # reads the forward's workspace
        self.adam = DeviceAdam(eng, [(W[k], self.dW[k]) for k in W], lr)

    def use_batch(self, x_buffer, target_buffer) -> None:
        """Read the batch from these buffers (``x`` and ``target`` descs) from now on."""
        self.x.set_data_handle(x_buffer)
        self.target.set_data_handle(target_buffer)
        self.loss_margs[dnnl.ARG_SRC].set_data_handle(target_buffer)

    def execute(self, s, first_since_read: bool) -> None:
        """Enqueue one step on the batch already in ``x`` and ``target``."""
        for prim, args in self.forward:
            prim.execute(s, args)
        (self.loss_set if first_since_read else self.loss_add).execute(s, self.loss_margs)
        for prim, args in self.backward:
            prim.execute(s, args)
        self.adam.execute(s)


class Evaluate:
    """Test-set logits from an inference LSTM and head over the training weights."""

    def __init__(self, eng, model: Model, X: np.ndarray, H: int):
        N = len(X)
        mem = lambda d: dnnl.memory(d, eng)  # noqa: E731
        pd = dnnl.lstm_forward.primitive_desc(eng, FWD_I, L2R, **lstm_descs(N, H, False))
        self.dst = mem(pd.dst_layer_desc())
        head = Head(eng, N, H, last_step(pd.dst_layer_desc()), FWD_I)
        self.w = Shared(eng, model, {"wl": pd.weights_layer_desc(), "wi": pd.weights_iter_desc(),
                                     "b": pd.bias_desc(), "wd": head.pd.weights_desc(),
                                     "bd": bias_desc(head.pd)})
        x = IO.new(pd.src_layer_desc(), eng, np.ascontiguousarray(X.transpose(1, 0, 2)))
        self.logits = mem(head.pd.dst_desc())
        W = self.w.mem
        self.steps = [
            (dnnl.lstm_forward(pd), {dnnl.ARG_SRC_LAYER: x, dnnl.ARG_WEIGHTS_LAYER: W["wl"],
                                     dnnl.ARG_WEIGHTS_ITER: W["wi"], dnnl.ARG_BIAS: W["b"],
                                     dnnl.ARG_DST_LAYER: self.dst}),
            (head.prim, {dnnl.ARG_SRC: view(last_step(pd.dst_layer_desc()), eng, self.dst),
                         dnnl.ARG_WEIGHTS: W["wd"], dnnl.ARG_BIAS: W["bd"],
                         dnnl.ARG_DST: self.logits})]

    def __call__(self, s) -> np.ndarray:
        self.w.refresh(s)
        for prim, args in self.steps:
            prim.execute(s, args)
        s.wait()
        return IO.read(self.logits)


def torch_steps_per_s(Xtr, ytr, H: int, B: int, lr: float, steps: int, seed: int,
                      threads: int) -> float:
    """The same model and optimizer in PyTorch on the CPU with ``threads`` threads: training
    steps per second."""
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    lstm, head = torch.nn.LSTM(F, H), torch.nn.Linear(H, CLASSES)
    opt = torch.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=lr)
    rng = np.random.default_rng(seed)
    X = torch.from_numpy(np.ascontiguousarray(Xtr.transpose(1, 0, 2)))
    y = torch.from_numpy(ytr.astype(np.int64))

    def step(idx):
        opt.zero_grad()
        out, _ = lstm(X[:, idx])
        loss = torch.nn.functional.cross_entropy(head(out[-1]), y[idx])
        loss.backward()
        opt.step()

    batches = [torch.from_numpy(rng.choice(len(Xtr), B, replace=False)) for _ in range(steps)]
    for idx in batches[:5]:                                  # warm-up
        step(idx)
    t0 = time.perf_counter()
    for idx in batches:
        step(idx)
    return steps / (time.perf_counter() - t0)


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
    ap.add_argument("--log-every", type=int, default=0, metavar="N",
                    help="read the loss every N steps (default: once per epoch, at its end)")
    ap.add_argument("--compare-torch", action="store_true",
                    help="also time the same model and optimizer in PyTorch on the CPU")
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
    rng = np.random.default_rng(a.seed)
    k = 1 / np.sqrt(H)
    init = {"wl": rng.uniform(-k, k, (1, 1, F, 4, H)),           # ldigo, gates i, f, c~, o
            "wi": rng.uniform(-k, k, (1, 1, H, 4, H)),
            "b": np.zeros((1, 1, 4, H)),
            "wd": rng.uniform(-k, k, (H, CLASSES)).T,            # inner product: [OC, IC]
            "bd": np.zeros(CLASSES)}
    init["b"][0, 0, 1] = 1.0                                     # forget-gate bias
    init = {n: np.ascontiguousarray(v, np.float32) for n, v in init.items()}

    train = TrainStep(eng, B, H, a.via == "dst_iter", init, a.lr)
    evaluate = Evaluate(eng, train.model, Xte, H)
    setup_bytes = IO.up
    io = Transfers()                             # the training steps' transfers

    def lr_at(epoch: int) -> float:
        return a.lr * (0.7 ** max(0, epoch - 8))               # decay over the last epochs

    per_epoch = len(Xtr) // B                                    # full batches only
    batches = EpochBatches(eng, train, per_epoch)
    test_accuracy, steps, train_time = 0.0, 0, 0.0
    unread = 0                                                   # steps summed in train.loss
    for epoch in range(1, a.epochs + 1):
        t0 = time.perf_counter()
        train.adam.set_lr(lr_at(epoch))
        idx = rng.permutation(len(Xtr))[:per_epoch * B].reshape(per_epoch, B)
        targets = np.zeros((per_epoch, B, CLASSES), np.float32)
        targets[np.arange(per_epoch)[:, None], np.arange(B), ytr[idx]] = -1.0 / B  # dNLL/dlogp
        batches.upload(io, Xtr[idx].transpose(0, 2, 1, 3), targets)  # [steps, T, B, F]
        epoch_loss = 0.0
        for j in range(per_epoch):
            batches.use(j)
            train.execute(s, first_since_read=unread == 0)
            unread += 1
            steps += 1
            if (a.log_every and steps % a.log_every == 0) or j == per_epoch - 1:
                s.wait()
                total = float(io.read(train.loss)[0, 0])
                epoch_loss += total
                if a.log_every:
                    print(f"  step {steps}: mean loss {total / unread:.4f} over {unread} steps")
                unread = 0
        s.wait()
        train_time += time.perf_counter() - t0
        logits = evaluate(s)
        test_accuracy = float(np.mean(logits.argmax(1) == yte))
        print(f"epoch {epoch:2d}: loss {epoch_loss / per_epoch:.4f}, test accuracy "
              f"{test_accuracy:.4f} ({time.perf_counter() - t0:.1f} s)")

    print(f"final test accuracy: {test_accuracy:.4f} (total {time.perf_counter() - t_start:.1f} s)")
    print(f"training: {steps / train_time:.1f} steps/s ({steps} steps, {train_time:.2f} s, "
          f"test evaluation excluded)")
    print(f"host<->device per training step: {io.up / steps:.0f} B up (inputs "
          f"{T * B * F * 4} B + targets {B * CLASSES * 4} B), {io.down / steps:.2f} B down "
          f"(the 4-byte loss, {io.down // 4} reads); once: {setup_bytes} B of weights, "
          f"optimizer state and test inputs up; per epoch: {IO.down // a.epochs} B of test "
          f"logits down")
    if a.compare_torch:
        try:
            import torch

            # OpenMP's threads spin: on a busy machine one thread can beat all of them
            for n in sorted({1, torch.get_num_threads()}):
                rate = torch_steps_per_s(Xtr, ytr, H, B, a.lr, 100, a.seed, n)
                print(f"PyTorch CPU ({n} thread{'s' * (n > 1)}), same model and optimizer: "
                      f"{rate:.1f} steps/s")
        except ImportError:
            print("PyTorch is not installed: no comparison")
    assert test_accuracy >= 0.95, f"test accuracy {test_accuracy:.4f} < 0.95"
    return test_accuracy


if __name__ == "__main__":
    main()
