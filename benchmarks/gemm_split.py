"""Time a GEMM at several split-k slice counts on one device (queued bound launches, as
benchdnn --gemm does), to check the ``split_k`` rule of pydnnl.runtime.heuristics.gemm.

    python benchmarks/gemm_split.py [--engine=gpu] 64x4096x1024 64x512x2048 ...
"""
from __future__ import annotations

import sys
import time

import pydnnl as dnnl
from pydnnl.benchdnn.gemm import parse
from pydnnl.runtime import gemm as matmul
from pydnnl.runtime.heuristics import gemm as rules


def time_split(eng, m, n, k, slices, reps=50, rounds=20):
    matmul._cache.clear()
    rule = rules.split_k
    rules.split_k = lambda info, m_, n_, k_, p: slices
    try:
        g = matmul.get_gemm(eng, matmul.GemmShape(m=m, n=n, k=k, lda=k, ldb=n, ldc=n), split=True)
    finally:
        rules.split_k = rule
    dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag

    def buf(count):
        return dnnl.memory(dnnl.memory.desc([max(count, 1)], dt.f32, tag.a), eng).buffer

    a, b, c, part = buf(m * k), buf(k * n), buf(m * n), buf(g.part_elems)
    s = dnnl.stream(eng)
    launches = g.bound((a, 0, b, 0, c, 0) + ((part, 0) if slices > 1 else ()))
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            for launch in launches:
                launch.launch(s, {})
        s.wait()
        best = min(best, (time.perf_counter() - t0) / reps * 1e3)
    return best


def main(argv):
    kind = "cpu"
    shapes = []
    for a in argv:
        if a.startswith("--engine="):
            kind = a.split("=", 1)[1]
        else:
            shapes.append(parse(a))
    eng = dnnl.engine(getattr(dnnl.engine.kind, kind), 0)
    for m, n, k in shapes:
        cells = []
        for s in (1, 2, 4, 8, 16):
            if k % s == 0 and k // s >= 32:
                cells.append(f"S={s}:{time_split(eng, m, n, k, s) * 1e3:.1f}us")
        print(f"split,{m}x{n}x{k}," + ",".join(cells), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
