"""Time the GEMM kernel family against numpy on one OpenCL platform.

For each shape, a small search times the first ``--points`` parameter sets of
``pydnnl.runtime.heuristics.gemm.search_space`` (B pre-packed when a point asks for it: weights are
static, so packing is not timed) with OpenCL profiling events, the median of ``--repeats``
launches after warm-up, interleaved over rounds; numpy's ``a @ b`` (float32) is timed in the
same run. Prints GFLOP/s, the ratio to numpy, and the winning parameters.

    python benchmarks/gemm_kernels.py --platform Intel
    python benchmarks/gemm_kernels.py --platform pocl --points 6 --shapes 1024x1024x1024

``--quiet`` waits, before each timing round, until other processes leave the CPU idle (on a
shared machine their load otherwise lands in the numbers).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

SHAPES = [(64, 2048, 512), (1280, 2048, 512), (64, 4096, 1024), (1024, 1024, 1024)]


def _cpu_busy_others():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    with open("/proc/self/stat") as f:
        s = f.read().rsplit(")", 1)[1].split()
    return sum(v) - v[3] - v[4] - int(s[11]) - int(s[12]), sum(v)


def wait_quiet(max_wait: float = 30.0, threshold: float = 0.08, window: float = 0.3) -> None:
    """Sleep until other processes use under ``threshold`` of the CPUs (Linux; else no-op)."""
    if not os.path.exists("/proc/stat"):
        return
    t0 = time.time()
    while time.time() - t0 < max_wait:
        b0, t0_ = _cpu_busy_others()
        time.sleep(window)
        b1, t1_ = _cpu_busy_others()
        if (b1 - b0) / max(1, t1_ - t0_) < threshold:
            return


def short(params: dict) -> str:
    from pydnnl.kernels import gemm as G

    base = G.DEFAULT_CPU_PARAMS if not params["local_prefetch"] else G.DEFAULT_GPU_PARAMS
    keys = ["rows", "cols", "vec"] + [k for k in params if k not in ("rows", "cols", "vec")
                                      and params[k] != base.get(k)]
    return " ".join(f"{k}={params[k]}" for k in keys)


def bench_shape(eng, queue, shape, points, repeats, rounds, quiet):
    import pyopencl as cl

    from pydnnl.kernels import gemm as G
    from pydnnl.kernels.source import source_from_loopy
    from pydnnl.runtime.heuristics import gemm as H

    m, n, k = shape
    pr = G.GemmProblem(m, n, k)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    ctx = eng.context
    mf = cl.mem_flags
    A = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    C = cl.Buffer(ctx, mf.READ_WRITE, size=m * n * 4)
    Bplain = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
    cands = []
    for params in H.search_space(pr, eng.info)[:points]:
        kpr, B = pr, Bplain
        if params["packed_b"]:
            pk = G.pack_b(pr, params)
            kpr = pk.problem
            B = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=pk.pack(b))
        t0 = time.perf_counter()
        src = source_from_loopy(G.build_gemm(kpr, params))
        t1 = time.perf_counter()
        knl = getattr(cl.Program(ctx, src.source).build(), src.name)
        t2 = time.perf_counter()
        knl.set_args(A, B, C)
        cands.append({"params": params, "knl": knl, "src": src, "B": B, "times": [],
                      "codegen": t1 - t0, "build": t2 - t1})

    def launch(c):
        return cl.enqueue_nd_range_kernel(queue, c["knl"], c["src"].global_size,
                                          c["src"].local_size)

    np_times = []
    per_round = max(1, repeats // rounds)
    for _ in range(rounds):
        for c in cands:
            launch(c)
            launch(c).wait()  # warm-up
            if quiet:
                wait_quiet()
            for _ in range(per_round):
                e = launch(c)
                e.wait()
                c["times"].append((e.profile.end - e.profile.start) * 1e-9)
        a @ b
        if quiet:
            wait_quiet()
        for _ in range(per_round):
            t = time.perf_counter()
            a @ b
            np_times.append(time.perf_counter() - t)
    fl = G.flops(pr)
    for c in cands:
        c["gflops"] = fl / np.median(c["times"]) / 1e9
    best = max(cands, key=lambda c: c["gflops"])
    # check the winner
    launch(best).wait()
    out = np.empty((m, n), np.float32)
    cl.enqueue_copy(queue, out, C)
    queue.finish()
    ref = a @ b
    err = float(np.max(np.abs(out - ref)) / max(1e-30, np.max(np.abs(ref))))
    return best, fl / np.median(np_times) / 1e9, err, cands


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--platform", default="Intel",
                    help="platform or device name substring (Intel, pocl, NVIDIA, ...)")
    ap.add_argument("--points", type=int, default=10, help="search-space points per shape")
    ap.add_argument("--repeats", type=int, default=21, help="timed launches per point")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    ap.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES),
                    help="comma-separated MxNxK list")
    ap.add_argument("--quiet", action="store_true",
                    help="wait for an idle CPU before each timing round")
    ap.add_argument("--all", action="store_true", help="print every point, not only the best")
    args = ap.parse_args(argv)

    import pydnnl._icd

    pydnnl._icd.ensure_icd()
    import pyopencl as cl

    from pydnnl.engine import engine

    name = {"pocl": "Portable Computing Language"}.get(args.platform.lower(), args.platform)
    eng = engine.from_name(name)
    queue = cl.CommandQueue(eng.context, eng.device,
                            properties=cl.command_queue_properties.PROFILING_ENABLE)
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    print(f"# {eng.info.platform} / {eng.info.name}; numpy {np.__version__}; "
          f"{args.points} points, median of {args.repeats} launches")
    print(f"{'M':>5} {'N':>5} {'K':>5} {'pydnnl GF/s':>12} {'numpy GF/s':>11} {'ratio':>6} "
          f"{'codegen s':>9} {'build s':>8}  params")
    for shape in shapes:
        best, np_gf, err, cands = bench_shape(eng, queue, shape, args.points, args.repeats,
                                              args.rounds, args.quiet)
        print(f"{shape[0]:5d} {shape[1]:5d} {shape[2]:5d} {best['gflops']:12.1f} {np_gf:11.1f} "
              f"{best['gflops'] / np_gf:6.2f} {best['codegen']:9.2f} {best['build']:8.2f}  "
              f"{short(best['params'])}" + ("" if err < 1e-4 else f"  WRONG (rel err {err:.1e})"))
        if args.all:
            for c in sorted(cands, key=lambda c: -c["gflops"]):
                print(f"{'':17} {c['gflops']:12.1f} {'':11} {c['gflops'] / np_gf:6.2f} "
                      f"{c['codegen']:9.2f} {c['build']:8.2f}  {short(c['params'])}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
