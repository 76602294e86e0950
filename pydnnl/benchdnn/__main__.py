"""``python -m pydnnl.benchdnn``: a benchmark and correctness driver modeled on oneDNN's benchdnn.

    python -m pydnnl.benchdnn --rnn --alg=VANILLA_LSTM --prop=FWD_I l1t50mb64sic512
    python -m pydnnl.benchdnn --rnn --mode=C --direction=concat l2t5mb3sic16
    python -m pydnnl.benchdnn --rnn --compare=torch --batch=benchmarks/rnn/inference.txt
    python -m pydnnl.benchdnn --rnn --seq-lengths=spread --compare=torch l1t50mb64sic512
    python -m pydnnl.benchdnn --gemm --compare=numpy 1024x1024x1024
    python -m pydnnl.benchdnn --conv --dir=BWD_D --mb=32 --compare=torch mb1ic64ih56oc64oh56kh3ph1
    python -m pydnnl.benchdnn --conv --mode=C --alg=im2col_gemm g2mb2ic8ih9oc8oh9kh3ph1
    python -m pydnnl.benchdnn --conv --mb=1 --compare=torch --batch=benchmarks/conv/resnet50.txt

Options apply to the problems that follow them, as in benchdnn. Output: one ``perf`` line per
problem (min and median ms, GFLOP/s, the peer's time and the ratio peer/pydnnl) or one
``check`` line in correctness mode.

--conv options: --dir=FWD_B|FWD_D|FWD_I|BWD_D|BWD_W|BWD_WB (default FWD_B),
--alg=direct|winograd|auto|<solver name> (default auto), --mb=N (overrides the problem's
minibatch; 0 keeps it), --mode=P|C, --engine=cpu|gpu, --compare=torch, --min-seconds=S.
Conv perf lines give GFLOP/s and the ratio from the minimum times (a shared machine
disturbs medians more).

--gemm times batches of 10 calls queued back to back (per-call time; the peers the same way),
as GEMMs follow each other inside a network; GPUs may split a long k (``splits=`` in the line).

Primitive drivers (``--matmul``, ``--ip``, ``--eltwise``, ``--softmax``, ``--binary``, ``--sum``,
``--concat``, ``--reduction``, ``--pool``, ``--bnorm``, ``--lnorm``) take oneDNN benchdnn's problem
syntax for that driver; each driver's options (``--alg=``, ``--dir=``, ``--axis=``, ...) are
collected until ``--reset`` or the next driver flag. See each module's docstring.

--rnn --mode=K: where the time goes: one ``kernel`` line per kernel name and launch size with
the launches and device time of one execution (forward, plus backward with --prop=BWD_DW),
from OpenCL profiling events, slowest first.
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

USAGE = __doc__

# driver flag -> module of pydnnl.benchdnn with ``run(eng, problem, opts, mode, compare,
# min_seconds) -> failures`` (``opts``: the driver's --key=value options seen so far)
OP_DRIVERS = {"matmul": "matmul", "ip": "ip", "eltwise": "eltwise", "softmax": "softmax",
              "binary": "binary", "sum": "sum", "concat": "concat", "reduction": "reduction",
              "pool": "pool", "bnorm": "bnorm", "lnorm": "lnorm"}


def _expand(argv: list[str]) -> list[str]:
    """Replace ``--batch=FILE`` by the file's tokens (comments after ``#`` dropped)."""
    out: list[str] = []
    for a in argv:
        if a.startswith("--batch="):
            path = Path(a.split("=", 1)[1])
            for line in path.read_text().splitlines():
                line = line.split("#", 1)[0].strip()
                if line:
                    out += _expand(line.split())
        else:
            out.append(a)
    return out


def main(argv: list[str] | None = None) -> int:
    import pydnnl as dnnl

    from ..error import invalid_arguments
    from . import conv as conv_drv
    from . import gemm as gemm_drv
    from . import rnn as rnn_drv

    argv = _expand(list(sys.argv[1:] if argv is None else argv))
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    driver = None
    mode = "P"
    compare = None
    engine_kind = "cpu"
    ropts = rnn_drv.RnnOptions()
    copts = conv_drv.ConvOptions()
    overrides: dict[str, int] = {}
    min_seconds = 1.0
    failures = 0
    eng = None
    op_opts: dict[str, str] = {}
    for a in argv:
        key, _, val = a.partition("=")
        if a in ("--rnn", "--gemm", "--conv"):
            driver = a[2:]
        elif a[2:] in OP_DRIVERS and a.startswith("--"):
            driver, op_opts = a[2:], {}
        elif driver in OP_DRIVERS and a.startswith("--") and key not in (
                "--mode", "--compare", "--engine", "--min-seconds", "--reset", "--batch"):
            op_opts[key[2:]] = val
        elif key == "--mode":
            mode = val.upper()
        elif key == "--compare":
            compare = val.lower() or None
        elif key == "--engine":
            engine_kind, eng = val, None
        elif key == "--alg" and driver == "conv":
            try:
                copts = replace(copts, alg=conv_drv.parse_alg(val))
            except invalid_arguments as e:
                raise SystemExit(str(e)) from None
        elif key == "--attr-post-ops" and driver == "conv":
            copts = replace(copts, post_ops=val)
        elif key == "--dir":
            try:
                copts = replace(copts, dir=conv_drv.parse_dir(val))
            except invalid_arguments as e:
                raise SystemExit(str(e)) from None
        elif key == "--alg":
            if val.upper() not in rnn_drv.ALGS:
                raise SystemExit(f"--alg: expected one of {', '.join(rnn_drv.ALGS)}, got {val}")
            ropts = replace(ropts, alg=val.upper())
        elif key == "--direction":
            if val not in rnn_drv.DIRECTIONS:
                raise SystemExit(f"--direction: expected one of {', '.join(rnn_drv.DIRECTIONS)}")
            ropts = replace(ropts, direction=val)
        elif key == "--prop":
            if val.upper() not in rnn_drv.PROPS:
                raise SystemExit(f"--prop: expected one of {', '.join(rnn_drv.PROPS)}")
            ropts = replace(ropts, prop=val.upper())
        elif key == "--activation":
            ropts = replace(ropts, activation=val.upper())
        elif a == "--with-peephole":
            ropts = replace(ropts, with_peephole=True)
        elif a == "--with-projection":
            ropts = replace(ropts, with_projection=True)
        elif key == "--seq-lengths":
            ropts = replace(ropts, seq_lengths=val or None)
        elif key in ("--l", "--t", "--mb"):
            overrides[key[2:]] = int(val)
        elif key == "--min-seconds":
            min_seconds = float(val)
        elif a == "--reset":
            ropts, overrides, mode, compare = rnn_drv.RnnOptions(), {}, "P", None
            op_opts = {}
            copts = conv_drv.ConvOptions()
        elif a.startswith("--"):
            raise SystemExit(f"unknown option {a}\n\n{USAGE}")
        else:
            if driver is None:
                raise SystemExit("give --rnn, --gemm or --conv before the problems")
            if eng is None:
                eng = dnnl.engine(getattr(dnnl.engine.kind, engine_kind), 0)
                print(f"# engine: {eng.info.name} [{eng.info.platform}]", flush=True)
            if driver in OP_DRIVERS:
                failures += _run_op(driver, eng, a, op_opts, mode, compare, min_seconds)
            elif driver == "conv":
                failures += _run_conv(eng, a, copts, overrides, mode, compare, min_seconds)
            elif driver == "rnn":
                p = replace(rnn_drv.parse_problem(a), **overrides)
                failures += _run_rnn(eng, p, ropts, mode, compare, min_seconds)
            else:
                failures += gemm_drv.run(eng, a, mode, compare, min_seconds)
    return 1 if failures else 0


def _run_op(driver, eng, text, opts, mode, compare, min_seconds) -> int:
    import importlib

    from ..error import error

    mod = importlib.import_module(f"{__package__}.{OP_DRIVERS[driver]}")
    try:
        return mod.run(eng, text, dict(opts), mode, compare, min_seconds)
    except (error, ValueError) as e:
        raise SystemExit(f"--{driver}: {e}") from None


def _run_conv(eng, text, o, overrides, mode, compare, min_seconds) -> int:
    from ..error import invalid_arguments
    from . import conv as conv_drv
    from .conv_problem import parse_conv_problem

    if mode not in ("P", "C"):
        raise SystemExit(f"--mode: expected P or C, got {mode}")
    try:
        p = parse_conv_problem(text).with_mb(overrides.get("mb", 0))
    except invalid_arguments as e:
        raise SystemExit(f"--conv: {e}") from None
    if compare not in (None, "torch"):
        raise SystemExit(f"--compare: the conv driver compares with torch only, got {compare}")
    if compare == "torch" and mode == "P" and not conv_drv.torch_available():
        print("# --compare=torch: PyTorch is not installed (pip install torch); timing pydnnl "
              "only", flush=True)
        compare = None
    return conv_drv.run(eng, p, o, mode, compare, min_seconds)


def _run_rnn(eng, p, o, mode, compare, min_seconds) -> int:
    from . import rnn as rnn_drv

    desc = (f"--alg={o.alg} --direction={o.direction} --prop={o.prop}"
            + (f" --activation={o.activation}" if o.alg == "VANILLA_RNN" else "")
            + (" --with-peephole" if o.with_peephole else "")
            + (" --with-projection" if o.with_projection else "")
            + (f" --seq-lengths={o.seq_lengths}" if o.seq_lengths else ""))
    b = rnn_drv.RnnBench(eng, p, o)
    if mode == "K":
        for name, size, count, ms in b.kernel_profile():
            print(f"kernel,{desc},{p.to_str()},{name},global={'x'.join(map(str, size or ()))},"
                  f"launches={count},total_ms={ms:.4f},per_launch_us={ms / count * 1e3:.2f}",
                  flush=True)
        return 0
    if mode == "C":
        if b.bwd is not None:
            raise SystemExit("--mode=C with --prop=BWD_DW: the backward is checked by the test "
                             "suite against finite differences; use --mode=P here")
        err = b.check()
        ok = err <= 1e-5
        print(f"check,{'passed' if ok else 'FAILED'},{desc},{p.to_str()},"
              f"max_rel_err={err:.2e}", flush=True)
        return 0 if ok else 1
    times = b.time(min_seconds=min_seconds)
    tmin, tmed = min(times), float(np.median(times))
    gflops = b.flops() / tmed * 1e-6
    line = (f"perf,{desc},{p.to_str()},create_ms={b.create_ms:.1f},min_ms={tmin:.3f},"
            f"median_ms={tmed:.3f},gflops={gflops:.1f}")
    if compare == "torch":
        dev = "cuda" if eng.info.is_gpu else "cpu"
        peer = rnn_drv.torch_time(p, o, device=dev, min_seconds=min_seconds)
        line += (f",torch_ms={peer:.3f},speed_vs_torch={peer / tmed:.2f}x" if peer is not None
                 else ",torch=n/a")
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
