r"""``python -m pydnnl.benchdnn``: a benchmark and correctness driver modeled on oneDNN's benchdnn.

    python -m pydnnl.benchdnn --rnn --alg=VANILLA_LSTM --prop=FWD_I l1t50mb64sic512
    python -m pydnnl.benchdnn --rnn --mode=C --direction=concat l2t5mb3sic16
    python -m pydnnl.benchdnn --rnn --compare=torch --batch=benchmarks/rnn/inference.txt
    python -m pydnnl.benchdnn --rnn --seq-lengths=spread --compare=torch l1t50mb64sic512
    python -m pydnnl.benchdnn --gemm --compare=numpy 1024x1024x1024
    python -m pydnnl.benchdnn --conv --dir=BWD_D --mb=32 --compare=torch mb1ic64ih56oc64oh56kh3ph1
    python -m pydnnl.benchdnn --conv --mode=C --alg=im2col_gemm g2mb2ic8ih9oc8oh9kh3ph1
    python -m pydnnl.benchdnn --conv --mb=1 --compare=torch --batch=benchmarks/conv/resnet50.txt

oneDNN's own input files run unchanged (``--batch=FILE``, nested includes relative to the
file, ``\`` continuations, comma-separated values run as their cross product, ``--reset``,
``--match=REGEX``); the rnn, conv and deconv drivers print benchdnn's status line per problem
(PASSED, FAILED, SKIPPED with oneDNN's reason, UNIMPLEMENTED with pydnnl's message) and its
summary line, and exit non-zero only when something FAILED. ``--random=N --seed=S`` runs N
seeded random problems of the driver under the options in effect.

    python -m pydnnl.benchdnn --rnn --mode=C --batch=tests/benchdnn/inputs/rnn/test_lstm_ci
    python -m pydnnl.benchdnn --conv --mode=C --dir=FWD_B,BWD_D,BWD_WB --seed=1 --random=100

Options apply to the problems that follow them, as in benchdnn. Output: one ``perf`` line per
problem (min and median ms, GFLOP/s, the peer's time and the ratio peer/pydnnl) or one
``check`` line in correctness mode.

--rnn options: --alg, --direction, --prop, --activation, --with-peephole[=BOOL],
--with-projection[=BOOL], --skip-nonlinear, --trivial-strides, --cfg, --tag, --flags,
--scaling, --attr-fpmath, --seq-lengths, --l/--t/--mb (defaults as benchdnn: VANILLA_RNN,
left2right, FWD_I, RELU).

--conv/--deconv options: --dir=FWD_B|FWD_D|FWD_I|BWD_D|BWD_W|BWD_WB (default FWD_B),
--stag/--wtag/--dtag=any|abx|axb, --dt, --attr-post-ops, --attr-scales, --attr-zero-points,
--alg=direct|winograd|auto|<solver name> (default auto), --mb=N (overrides the problem's
minibatch; 0 keeps it), --mode=P|C|CREATE|K, --engine=cpu|gpu, --compare=torch, --min-seconds=S.
Conv perf lines give GFLOP/s and the ratio from the minimum times (a shared machine
disturbs medians more).

--gemm times batches of 10 calls queued back to back (per-call time; the peers the same way),
as GEMMs follow each other inside a network; GPUs may split a long k (``splits=`` in the line).

Primitive drivers (``--matmul``, ``--ip``, ``--eltwise``, ``--softmax``, ``--binary``, ``--sum``,
``--concat``, ``--reduction``, ``--pool``, ``--bnorm``, ``--lnorm``) take oneDNN benchdnn's problem
syntax for that driver; each driver's options (``--alg=``, ``--dir=``, ``--axis=``, ...) are
collected until ``--reset`` or the next driver flag. See each module's docstring.

--rnn --mode=CREATE: what creating the primitives costs a new process: per problem, a fresh
Python process sharing the kernel cache (``PYDNNL_CACHE_DIR``) creates them after this one
did, and a ``create`` line gives its creation, import and engine times in ms (an empty cache
directory measures a first-ever creation; this process fills it first, so run a problem with
another T or N to see what a new size costs). Both halves also say what their kernels cost:
``generated``/``generate_ms`` (loopy's import and code generation), ``built``/``build_ms``
(OpenCL compilations), ``compiler_start_ms`` (the compiler's set-up on the build thread, beside
the first generation) and ``loaded`` (programs read from cached binaries), ``fresh_``-prefixed
for the fresh process (``kernel_cache.creation_costs()``). ``--conv --mode=CREATE`` (and
``--deconv``) gives the same fields for this process's creation only.

--rnn --mode=K (and --conv, --deconv, --ip): where the time goes: one ``kernel`` line per
kernel name and launch size with the launches and device time of one execution (RNN:
forward, plus backward with --prop=BWD_DW; convolution and inner product: the --dir), from
OpenCL profiling events, slowest first.
"""
from __future__ import annotations

import re
import sys

USAGE = __doc__

# driver flag -> module of pydnnl.benchdnn with ``run(eng, problem, opts, mode, compare,
# min_seconds) -> failures`` (``opts``: the driver's --key=value options seen so far)
OP_DRIVERS = {"matmul": "matmul", "ip": "ip", "eltwise": "eltwise", "softmax": "softmax",
              "binary": "binary", "sum": "sum", "concat": "concat", "reduction": "reduction",
              "pool": "pool", "bnorm": "bnorm", "lnorm": "lnorm"}


def _isa_line(info) -> str:
    """The instruction set and vector width the kernels are sized for (figures depend on it)."""
    if info.is_gpu:
        return (f"arch {info.arch}, {info.compute_units} compute units, "
                f"SIMD {info.simd_width}")
    return (f"isa {info.arch}, {info.simd_width}-wide float vectors, "
            f"{info.compute_units} cores, {info.global_mem_cache_bytes >> 10} KiB cache")


def _expand(argv: list[str]) -> list[str]:
    """Replace ``--batch=FILE`` by the file's tokens (see :mod:`.inputs`)."""
    from ..error import invalid_arguments
    from .inputs import expand_batches

    try:
        return expand_batches(argv)
    except invalid_arguments as e:
        raise SystemExit(str(e)) from None


# options of the rnn, conv and deconv drivers, kept as written (values may be lists)
CASE_OPTIONS = {
    "rnn": ("alg", "direction", "prop", "activation", "with-peephole", "with-projection",
            "seq-lengths", "skip-nonlinear", "trivial-strides", "cfg", "attr-fpmath", "flags",
            "scaling", "tag", "l", "t", "mb"),
    "conv": ("dir", "alg", "attr-post-ops", "dt", "cfg", "stag", "wtag", "dtag", "mb",
             "attr-scales", "attr-zero-points", "attr-fpmath"),
}
CASE_OPTIONS["deconv"] = CASE_OPTIONS["conv"]


def main(argv: list[str] | None = None) -> int:
    import pydnnl as dnnl

    from . import gemm as gemm_drv
    from .status import Summary

    argv = _expand(list(sys.argv[1:] if argv is None else argv))
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    driver = None
    mode = "P"
    compare = None
    engine_kind = "cpu"
    min_seconds = 1.0
    failures = 0
    eng = None
    op_opts: dict[str, str] = {}
    case_opts: dict[str, str] = {}
    summary = Summary()
    match = ""
    seed = 0
    for a in argv:
        key, _, val = a.partition("=")
        if a in ("--rnn", "--gemm", "--conv", "--deconv"):
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
        elif key == "--min-seconds":
            min_seconds = float(val)
        elif key == "--seed":
            seed = int(val)
        elif key == "--random" and driver in CASE_OPTIONS:
            from .cases import run_cases
            from .inputs import random_problems

            if eng is None:
                eng = dnnl.engine(getattr(dnnl.engine.kind, engine_kind), 0)
            for text in random_problems(driver, int(val), seed):
                run_cases(driver, eng, text, case_opts, mode, compare, min_seconds, summary)
        elif key == "--match" and driver not in OP_DRIVERS:
            match = val  # a global setting, as in benchdnn: input files' --reset keeps it
        elif a == "--reset":
            # as in benchdnn, --reset restores the driver's options; --mode, --engine and
            # the like are global settings that stay
            op_opts, case_opts = {}, {}
        elif a in ("--with-peephole", "--with-projection") and driver == "rnn":
            case_opts[a[2:]] = "true"
        elif driver in CASE_OPTIONS and a.startswith("--") and key[2:] in CASE_OPTIONS[driver]:
            case_opts[key[2:]] = val
        elif a.startswith("--"):
            raise SystemExit(f"unknown option {a}\n\n{USAGE}")
        else:
            if driver is None:
                raise SystemExit("give --rnn, --gemm, --conv or --deconv before the problems")
            if eng is None:
                eng = dnnl.engine(getattr(dnnl.engine.kind, engine_kind), 0)
                print(f"# engine: {eng.info.name} [{eng.info.platform}]; {_isa_line(eng.info)}",
                      flush=True)
            if driver in OP_DRIVERS:
                failures += _run_op(driver, eng, a, op_opts, mode, compare, min_seconds)
            elif driver in CASE_OPTIONS:
                from .cases import run_cases

                if not match or re.search(match, a):
                    run_cases(driver, eng, a, case_opts, mode, compare, min_seconds, summary)
            else:
                failures += gemm_drv.run(eng, a, mode, compare, min_seconds)
    if summary.listed:
        print(summary.line(), flush=True)
    return 1 if failures or summary.failed else 0


def _run_op(driver, eng, text, opts, mode, compare, min_seconds) -> int:
    import importlib

    from ..error import error

    mod = importlib.import_module(f"{__package__}.{OP_DRIVERS[driver]}")
    try:
        return mod.run(eng, text, dict(opts), mode, compare, min_seconds)
    except (error, ValueError) as e:
        raise SystemExit(f"--{driver}: {e}") from None


if __name__ == "__main__":
    sys.exit(main())
