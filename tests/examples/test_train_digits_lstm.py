"""examples/train_digits_lstm.py: one training step of the example's device-only graph (LSTM,
inner-product head, log-softmax, the NLL loss and its gradient, backward passes, Adam) against
a float64 numpy composition of pydnnl's reference LSTM, softmax cross-entropy written out, and
the reference Adam."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from pydnnl.reference.optimizer import adam_update
from pydnnl.reference.rnn import rnn_backward, rnn_forward

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_digits_lstm.py"


def _load():
    spec = importlib.util.spec_from_file_location("train_digits_lstm", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ex = _load()
B, H, LR = 5, 6, 0.01


@pytest.mark.parametrize("via", ["dst_layer", "dst_iter"])
def test_one_step_matches_numpy(engine, stream, via):
    T, F, C = ex.T, ex.F, ex.CLASSES
    rng = np.random.default_rng(7)
    init = {"wl": rng.uniform(-0.5, 0.5, (1, 1, F, 4, H)),
            "wi": rng.uniform(-0.5, 0.5, (1, 1, H, 4, H)),
            "b": rng.uniform(-0.1, 0.1, (1, 1, 4, H)),
            "wd": rng.uniform(-0.5, 0.5, (C, H)), "bd": rng.uniform(-0.1, 0.1, C)}
    init = {k: v.astype(np.float32) for k, v in init.items()}
    x = rng.standard_normal((T, B, F)).astype(np.float32)
    labels = rng.integers(0, C, B)
    targets = np.zeros((B, C), np.float32)
    targets[np.arange(B), labels] = -1.0 / B

    train = ex.TrainStep(engine, B, H, via == "dst_iter", init, LR)
    batches = ex.EpochBatches(engine, train, 1)
    batches.upload(ex.Transfers(), x[None], targets[None])
    batches.use(0)
    train.execute(stream, first_since_read=True)
    stream.wait()

    # float64 reference of the same step
    y, _, _, cache = rnn_forward("vanilla_lstm", x, None, None, init["wl"], init["wi"],
                                 init["b"], dtype=np.float64)
    h = y[-1]
    z = h @ init["wd"].T.astype(np.float64) + init["bd"]
    z -= z.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    dz = (np.exp(logp) - np.eye(C)[labels]) / B
    dy = np.zeros((T, B, H))
    dy[-1] = dz @ init["wd"]
    g = rnn_backward("vanilla_lstm", cache, dy)
    want = {"wl": g["diff_weights_layer"], "wi": g["diff_weights_iter"], "b": g["diff_bias"],
            "wd": dz.T @ h, "bd": dz.sum(0)}

    assert train.loss.to_numpy()[0, 0] == pytest.approx(-logp[np.arange(B), labels].mean(),
                                                        rel=1e-5)
    for k, ref in want.items():
        got = train.dW[k].to_numpy()
        assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max(), k
        # Adam's first step from the device's own gradient (a gradient near zero makes
        # g / (|g| + eps) sensitive to its last bits: compared above, not through the update)
        p, _, _ = adam_update(init[k], got, 0.0, 0.0, 1, LR)
        np.testing.assert_allclose(train.model.mem[k].to_numpy(), p, rtol=1e-6, atol=1e-7)
    assert train.adam.step.to_numpy()[0] == 1.0
