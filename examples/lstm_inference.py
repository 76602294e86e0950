"""LSTM inference with pydnnl, the oneDNN way: descs with `any`, query, reorder, execute.

Run: python examples/lstm_inference.py [--device cpu|gpu] [T N C]
"""
import argparse
import time

import numpy as np

import pydnnl as dnnl
from pydnnl.reference.rnn import rnn_forward

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("sizes", nargs="*", type=int, default=[25, 16, 128], help="T N C")
    a = ap.parse_args()
    T, N, C = a.sizes
    L, D, G = 1, 1, 4

    eng = dnnl.engine(getattr(dnnl.engine.kind, a.device), 0)
    s = dnnl.stream(eng)
    print(f"device: {eng.info.name} [{eng.info.platform}]")

    rng = np.random.default_rng(0)
    x = rng.standard_normal((T, N, C)).astype(np.float32)
    w_layer = (rng.standard_normal((L, D, C, G, C)) / np.sqrt(C)).astype(np.float32)  # ldigo
    w_iter = (rng.standard_normal((L, D, C, G, C)) / np.sqrt(C)).astype(np.float32)
    bias = rng.standard_normal((L, D, G, C)).astype(np.float32) * 0.1

    # 1. Describe the problem; let the primitive choose the weights layout.
    src_md = dnnl.memory.desc([T, N, C], dt.f32, tag.tnc)
    w_any = dnnl.memory.desc([L, D, C, G, C], dt.f32, tag.any)
    bias_md = dnnl.memory.desc([L, D, G, C], dt.f32, tag.ldgo)
    dst_md = dnnl.memory.desc([T, N, C], dt.f32, tag.tnc)
    t0 = time.perf_counter()
    pd = dnnl.lstm_forward.primitive_desc(
        eng, dnnl.prop_kind.forward_inference, dnnl.rnn_direction.unidirectional_left2right,
        src_md, None, None, w_any, w_any, bias_md, dst_md, None, None)
    lstm = dnnl.lstm_forward(pd)
    print(f"primitive created in {(time.perf_counter() - t0) * 1e3:.0f} ms "
          f"({pd.impl_info_str()}); weights layout chosen: {pd.weights_layer_desc()!r}")

    # 2. Put the user's ldigo weights into the chosen layout (a reorder on the device).
    wl = dnnl.memory(pd.weights_layer_desc(), eng)
    wi = dnnl.memory(pd.weights_iter_desc(), eng)
    for user, mem in ((w_layer, wl), (w_iter, wi)):
        user_mem = dnnl.memory(dnnl.memory.desc(user.shape, dt.f32, tag.ldigo), eng, user)
        dnnl.reorder(user_mem, mem).execute(s, user_mem, mem)

    # 3. Execute.
    src = dnnl.memory(src_md, eng, x)
    b = dnnl.memory(bias_md, eng, bias)
    dst = dnnl.memory(pd.dst_layer_desc(), eng)
    args = {dnnl.ARG_SRC_LAYER: src, dnnl.ARG_WEIGHTS_LAYER: wl, dnnl.ARG_WEIGHTS_ITER: wi,
            dnnl.ARG_BIAS: b, dnnl.ARG_DST_LAYER: dst}
    lstm.execute(s, args)
    s.wait()
    t0 = time.perf_counter()
    reps = 5
    for _ in range(reps):
        lstm.execute(s, args)
    s.wait()
    ms = (time.perf_counter() - t0) * 1e3 / reps
    gflop = 2 * T * N * G * C * (C + C) * 1e-9
    y = dst.to_numpy()

    ref = rnn_forward("vanilla_lstm", x, None, None, w_layer, w_iter, bias, dtype=np.float64)[0]
    err = np.max(np.abs(y - ref)) / np.max(np.abs(ref))
    print(f"LSTM T={T} N={N} C={C}: {ms:.2f} ms per forward, {gflop / ms * 1e3:.1f} GFLOP/s")
    print(f"dst_layer {list(y.shape)}, last step of sequence 0: {np.round(y[-1, 0, :4], 4)} ...")
    print(f"max relative difference to the numpy reference: {err:.1e}")
    assert err < 1e-5


if __name__ == "__main__":
    main()
