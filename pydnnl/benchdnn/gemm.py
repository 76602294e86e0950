"""benchdnn-style GEMM driver: ``MxNxK`` problems timed against numpy."""
from __future__ import annotations

import time

import numpy as np

import pydnnl as dnnl

from ..runtime.gemm import GemmShape, get_gemm


def parse(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"gemm problem {text!r}: expected MxNxK, e.g. 1024x1024x1024") from None
    return m, n, k


# Calls queued back to back per timed batch: GEMMs inside a network follow each other without
# a host round trip, so a round trip per call (tens of microseconds through a GPU driver)
# would measure the driver, not the GEMM. The same holds for the peers.
BATCH_CALLS = 10


def _median_ms(fn, min_seconds: float, sync=lambda: None) -> tuple[float, float]:
    """(min, median) ms per call of ``fn`` over batches of ``BATCH_CALLS`` queued calls,
    each batch ended by ``sync``."""
    fn()
    sync()
    times = []
    t_end = time.perf_counter() + min_seconds
    while len(times) < 5 or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        for _ in range(BATCH_CALLS):
            fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3 / BATCH_CALLS)
        if len(times) >= 1000:
            break
    return min(times), float(np.median(times))


def run(eng, text: str, mode: str, compare: str | None, min_seconds: float) -> int:
    m, n, k = parse(text)
    dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    ma = dnnl.memory(dnnl.memory.desc([m, k], dt.f32, tag.ab), eng, a)
    mb = dnnl.memory(dnnl.memory.desc([k, n], dt.f32, tag.ab), eng, b)
    mc = dnnl.memory(dnnl.memory.desc([m, n], dt.f32, tag.ab), eng)
    s = dnnl.stream(eng)
    t0 = time.perf_counter()
    # B is treated as a weight: packed once into the panels the kernel reads (not timed)
    g = get_gemm(eng, GemmShape(m=m, n=n, k=k, lda=k, ldb=n, ldc=n), static_b=True, split=True)
    part = (dnnl.memory(dnnl.memory.desc([g.part_elems], dt.f32, tag.a), eng).buffer
            if g.splits > 1 else None)
    b_buf = mb.buffer
    if g.packed:
        packed = dnnl.memory(dnnl.memory.desc([g.packed_size], dt.f32, tag.a), eng)
        pk = g.packer(1, k * n)
        pk(s, *g.packer_args(pk, mb.buffer, 0, packed.buffer, 0))
        b_buf = packed.buffer
    create_ms = (time.perf_counter() - t0) * 1e3

    # launches with their arguments set once, as primitives' plans run them
    launches = g.bound((ma.buffer, 0, b_buf, 0, mc.buffer, 0) + ((part, 0) if part else ()))

    def once():
        for launch in launches:
            launch.launch(s, {})

    if mode == "C":
        once()
        s.wait()
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err = float(np.max(np.abs(mc.to_numpy() - ref)) / np.max(np.abs(ref)))
        ok = err <= 1e-5
        print(f"check,{'passed' if ok else 'FAILED'},gemm,{m}x{n}x{k},max_rel_err={err:.2e}",
              flush=True)
        return 0 if ok else 1
    tmin, tmed = _median_ms(once, min_seconds, s.wait)
    gflops = 2 * m * n * k / tmed * 1e-6
    line = (f"perf,gemm,{m}x{n}x{k},splits={g.splits},create_ms={create_ms:.1f},"
            f"min_ms={tmin:.3f},median_ms={tmed:.3f},gflops={gflops:.1f}")
    if compare == "torch":
        peer = _torch_ms(m, n, k, "cuda" if eng.info.is_gpu else "cpu", min_seconds)
        line += (f",torch_ms={peer:.3f},torch_gflops={2 * m * n * k / peer * 1e-6:.1f},"
                 f"ratio={peer / tmed:.2f}" if peer else ",torch=n/a")
    if compare == "numpy":
        c = np.empty((m, n), np.float32)
        _, nmed = _median_ms(lambda: np.matmul(a, b, out=c), min_seconds)
        line += (f",numpy_ms={nmed:.3f},numpy_gflops={2 * m * n * k / nmed * 1e-6:.1f},"
                 f"ratio={nmed / tmed:.2f}")
    print(line, flush=True)
    return 0


def _torch_ms(m: int, n: int, k: int, device: str, min_seconds: float):
    """Median ms of torch.matmul in fp32 (TF32 disabled), or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    if device == "cuda":
        if not torch.cuda.is_available():
            return None
        torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(m, k, device=device)
    b = torch.randn(k, n, device=device)
    c = torch.empty(m, n, device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    return _median_ms(lambda: torch.matmul(a, b, out=c), min_seconds, sync)[1]
