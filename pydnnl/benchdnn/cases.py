"""One problem of the rnn, conv or deconv driver under every combination of its options.

Each combination gets one of benchdnn's statuses (:mod:`.status`): oneDNN's own consistency
rules mark a problem SKIPPED (``Invalid case``) before anything is created; options pydnnl
does not have (data types other than f32, scales, zero points, non-trivial strides) give
UNIMPLEMENTED with pydnnl's message; a primitive pydnnl refuses gives UNIMPLEMENTED or
INVALID_ARGUMENTS with its message; a check gives PASSED or FAILED.
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from ..error import invalid_arguments, out_of_memory, unimplemented
from ..runtime.kernel_cache import creation_costs
from . import status as S
from .inputs import expand, parse_bool

_F32_CFGS = ("", "f32", "f32:f32:f32")


def _repro(driver: str, combo: dict[str, str], mode: str, problem: str) -> str:
    opts = " ".join(f"--{k}={v}" for k, v in combo.items())
    return f"--{driver} --mode={mode} {opts} {problem}".replace("  ", " ")


def run_cases(driver: str, eng, text: str, opts: dict[str, str], mode: str,
              compare: str | None, min_seconds: float, summary: S.Summary) -> None:
    """Run problem ``text`` under every combination of ``opts``, reporting into ``summary``."""
    for combo in expand(opts):
        if driver == "rnn":
            _rnn_case(eng, text, combo, mode, compare, min_seconds, summary)
        else:
            _conv_case(driver, eng, text, combo, mode, compare, min_seconds, summary)


# ---------------------------------------------------------------------------------------------
# rnn
# ---------------------------------------------------------------------------------------------
def rnn_invalid(p, o) -> str:
    """oneDNN benchdnn's consistency rules for an RNN problem (its ``skip_invalid``): the
    rule a problem breaks, or '' when it is consistent."""
    gru = o.alg in ("VANILLA_GRU", "LBR_GRU")
    augru = o.alg in ("VANILLA_AUGRU", "LBR_AUGRU")
    if not o.with_projection and p.dhc != p.dic:
        return "dhc != dic without projection"
    if p.l > 1 and p.slc != p.dic:
        return "slc != dic with more than one layer"
    if p.t > 1 and p.sic != p.dic:
        return "sic != dic with more than one time step"
    if gru and p.sic != p.dic:
        return "GRU with sic != dic"
    if augru and not (p.sic == p.dic and p.l == 1 and o.direction == "left2right"):
        return "AUGRU needs sic == dic, one layer and left2right"
    if (o.with_peephole or o.with_projection) and o.alg != "VANILLA_LSTM":
        return "peephole and projection are LSTM only"
    return ""


def _rnn_cfg(cfg: str, R) -> str:
    if cfg == "f32:f32:f32":
        return "f32"
    if cfg not in R.CFGS:
        raise SystemExit(f"--cfg: expected one of {', '.join(R.CFGS)}, got {cfg}")
    return cfg


def _rnn_scaling(v: str) -> str:
    if v not in ("common", "per_oc"):
        raise SystemExit(f"--scaling: expected common or per_oc, got {v}")
    return v


def rnn_not_supported(p, o, trivial: bool) -> str:
    """oneDNN benchdnn's ``skip_unimplemented_prb`` rules for data types: int8 runs
    forward inference of LSTM and GRU with trivial strides; LSTM with projection has no
    bf16/f16 configuration. The reason, or ''."""
    from . import rnn as R

    if R.int8_cfg(o.cfg) is not None:
        if o.alg not in ("VANILLA_LSTM", "VANILLA_GRU"):
            return f"int8 cfg {o.cfg} is LSTM and GRU only"
        if o.prop != "FWD_I":
            return f"int8 cfg {o.cfg} is forward inference only"
        if not trivial:
            return "int8 with non-trivial strides"
    elif o.with_projection and o.cfg != "f32":
        return f"LSTM with projection in {o.cfg}"
    return ""


def _costs_text(before: dict, after: dict, prefix: str = "") -> str:
    """The kernel costs between two ``creation_costs()`` readings, as ``key=value`` fields:
    kernels generated and their ms (loopy), programs compiled and their ms, the compiler's
    set-up ms, programs loaded from cached binaries."""
    fields = (("generated", "kernels_generated", "d"), ("generate_ms", "generate_ms", ".0f"),
              ("built", "programs_built", "d"), ("build_ms", "build_ms", ".0f"),
              ("compiler_start_ms", "compiler_start_ms", ".0f"),
              ("loaded", "programs_loaded", "d"))
    return ",".join(f"{prefix}{name}={after[key] - before.get(key, 0):{fmt}}"
                    for name, key, fmt in fields)


def _rnn_case(eng, text, combo, mode, compare, min_seconds, summary) -> None:
    from . import rnn as R

    try:
        p = R.parse_problem(text)
    except ValueError as e:
        raise SystemExit(f"--rnn: {e}") from None
    over = {k: int(combo[k]) for k in ("l", "t", "mb") if combo.get(k, "") not in ("", "0")}
    # benchdnn's own parser does not re-derive dic from an overridden dhc; neither do we
    p = replace(p, **over)
    alg = combo.get("alg", "VANILLA_RNN").upper()
    direction = combo.get("direction", "left2right")
    prop = combo.get("prop", "FWD_I").upper()
    act = combo.get("activation", "RELU").upper()
    for name, val, choices in (("--alg", alg, R.ALGS), ("--direction", direction, R.DIRECTIONS),
                               ("--prop", prop, R.PROPS)):
        if val not in choices:
            raise SystemExit(f"{name}: expected one of {', '.join(choices)}, got {val}")
    if act == "UNDEF":
        act = "RELU"  # benchdnn's default; only VANILLA_RNN reads it
    if act not in R.ACTIVATIONS:
        raise SystemExit(f"--activation: expected one of UNDEF, {', '.join(R.ACTIVATIONS)}, "
                         f"got {act}")
    try:
        o = R.RnnOptions(alg=alg, direction=direction, prop=prop, activation=act,
                         with_peephole=parse_bool("--with-peephole",
                                                  combo.get("with-peephole", "false")),
                         with_projection=parse_bool("--with-projection",
                                                    combo.get("with-projection", "false")),
                         seq_lengths=combo.get("seq-lengths") or None,
                         fpmath=combo.get("attr-fpmath", "") or "",
                         cfg=_rnn_cfg(combo.get("cfg", "") or "f32", R),
                         scaling=_rnn_scaling(combo.get("scaling", "") or "common"))
        trivial = parse_bool("--trivial-strides", combo.get("trivial-strides", "true"))
        skip_nl = parse_bool("--skip-nonlinear", combo.get("skip-nonlinear", "false"))
    except invalid_arguments as e:
        raise SystemExit(str(e)) from None
    if not o.with_projection and "dic" not in text:
        p = replace(p, dic=p.dhc)
    repro = _repro("rnn", combo, mode, p.to_str())
    tag = combo.get("tag", "") or "any:any:any"
    why = rnn_invalid(p, o)
    if why:
        summary.report(S.SKIPPED, f"{S.INVALID_CASE}: {why}", repro)
        return
    if not trivial and (tag.split(":")[0] == "any" or tag.split(":")[-1] == "any"):
        summary.report(S.SKIPPED, f"{S.INVALID_CASE}: non-trivial strides with tag any", repro)
        return
    why = rnn_not_supported(p, o, trivial)
    if why:
        summary.report(S.SKIPPED, f"{S.CASE_NOT_SUPPORTED}: {why}", repro)
        return
    missing = []
    if not trivial:
        missing.append("--trivial-strides=false: the benchmark creates dense tensors only")
    if skip_nl:
        missing.append("--skip-nonlinear=true: pydnnl's cells have no linear test mode")
    if tag not in ("any:any:any", "abc:any:abc"):
        missing.append(f"--tag={tag}: the benchmark creates tnc/any/tnc tensors only")
    if missing:
        summary.report(S.UNIMPLEMENTED, "; ".join(missing), repro)
        return
    costs0 = creation_costs()
    t0 = time.perf_counter()
    try:  # --mode=CREATE: in this process first, so that errors get their status line
        b = R.create(eng, p, o) if mode == "CREATE" else R.RnnBench(eng, p, o)
    except unimplemented as e:
        summary.report(S.UNIMPLEMENTED, str(e), repro)
        return
    except invalid_arguments as e:
        summary.report(S.INVALID_ARGUMENTS, str(e), repro)
        return
    if mode == "CREATE":
        here_ms = (time.perf_counter() - t0) * 1e3
        here = creation_costs()  # builds run on their own thread: read after create returned
        t = R.create_in_fresh_process(eng, p, o)
        print(f"create,{repro},create_ms={here_ms:.1f},{_costs_text(costs0, here)},"
              f"fresh_process_create_ms={t['create_ms']:.1f},"
              f"import_ms={t['import_ms']:.0f},engine_ms={t['engine_ms']:.0f},"
              f"{_costs_text({}, t, 'fresh_')}", flush=True)
        summary.report(S.PASSED, "", repro)
        return
    if mode == "K":
        desc = " ".join(f"--{k}={v}" for k, v in combo.items())
        for name, size, count, ms in b.kernel_profile():
            print(f"kernel,{desc},{p.to_str()},{name},global={'x'.join(map(str, size or ()))},"
                  f"launches={count},total_ms={ms:.4f},per_launch_us={ms / count * 1e3:.2f}",
                  flush=True)
        return
    if mode == "C" and b.q is not None:
        err = b.check_int8()
        ok = err <= 1.0
        print(f"check,{'passed' if ok else 'FAILED'},{repro},max_err_steps={err:.2f},"
              f"tolerance=1 step", flush=True)
        summary.report(S.PASSED if ok else S.FAILED, "", repro)
        return
    if mode == "C":
        err = b.check() if b.bwd is None else b.check_backward()
        tol = R.tolerance(p, o)
        ok = err <= tol
        print(f"check,{'passed' if ok else 'FAILED'},{repro},max_rel_err={err:.2e},"
              f"tolerance={tol:.1e}", flush=True)
        summary.report(S.PASSED if ok else S.FAILED, "", repro)
        return
    times = b.time(min_seconds=min_seconds)
    tmin, tmed = min(times), float(np.median(times))
    gflops = b.flops() / tmed * 1e-6
    line = (f"perf,{repro},create_ms={b.create_ms:.1f},min_ms={tmin:.3f},"
            f"median_ms={tmed:.3f},gflops={gflops:.1f}")
    if compare == "torch":
        dev = "cuda" if eng.info.is_gpu else "cpu"
        peer = R.torch_time(p, o, device=dev, min_seconds=min_seconds)
        line += (f",torch_ms={peer:.3f},torch_mode={R.torch_peer(o, dev)},"
                 f"speed_vs_torch={peer / tmed:.2f}x" if peer is not None else ",torch=n/a")
    print(line, flush=True)


# ---------------------------------------------------------------------------------------------
# conv, deconv
# ---------------------------------------------------------------------------------------------
def _conv_case(driver, eng, text, combo, mode, compare, min_seconds, summary) -> None:
    from . import conv as C
    from .conv_problem import parse_conv_problem

    if mode not in ("P", "C", "CREATE", "K"):
        raise SystemExit(f"--mode: expected P, C, CREATE or K, got {mode}")
    if compare not in (None, "torch"):
        raise SystemExit(f"--compare: the conv driver compares with torch only, got {compare}")
    try:
        p = parse_conv_problem(text, deconv=driver == "deconv").with_mb(
            int(combo.get("mb", "") or 0))
        o = C.ConvOptions(dir=C.parse_dir(combo.get("dir", "") or "FWD_B"),
                          alg=C.parse_alg(combo.get("alg", "") or "auto"),
                          post_ops=combo.get("attr-post-ops", ""),
                          stag=combo.get("stag", "") or "any",
                          wtag=combo.get("wtag", "") or "any",
                          dtag=combo.get("dtag", "") or "any",
                          fpmath=combo.get("attr-fpmath", "") or "",
                          dt=C.parse_dt(C.dt_option(combo)),
                          scales=combo.get("attr-scales", "") or "",
                          zero_points=combo.get("attr-zero-points", "") or "")
    except invalid_arguments as e:
        raise SystemExit(f"--{driver}: {e}") from None
    repro = _repro(driver, combo, mode, p.to_str())
    missing = []
    if o.post_ops:
        from .common import parse_post_ops

        try:  # oneDNN's spellings pydnnl's post-ops lack (prelu, s8 operands) land here
            parse_post_ops(o.post_ops, p.dst_dims())
        except invalid_arguments as e:
            missing.append(f"pydnnl has no such post-op: {e}")
    if missing:
        summary.report(S.UNIMPLEMENTED, "; ".join(missing), repro)
        return
    if mode == "CREATE":  # this process only: an empty cache measures a first-ever creation
        try:
            b = C.ConvBench(eng, p, o)
        except (unimplemented, out_of_memory) as e:
            summary.report(S.UNIMPLEMENTED, str(e), repro)
            return
        except invalid_arguments as e:
            summary.report(S.INVALID_ARGUMENTS, str(e), repro)
            return
        print(f"create,{repro},solver={b.solver},create_ms={b.create_ms:.1f},"
              f"{_costs_text(*b.costs)}", flush=True)
        summary.report(S.PASSED, "", repro)
        return
    if mode == "K":
        try:
            b = C.ConvBench(eng, p, o)
        except (unimplemented, out_of_memory) as e:
            summary.report(S.UNIMPLEMENTED, str(e), repro)
            return
        from .common import kernel_profile

        for name, size, count, ms in kernel_profile(b):
            print(f"kernel,{repro},solver={b.solver},{name},"
                  f"global={'x'.join(map(str, size or ()))},launches={count},"
                  f"total_ms={ms:.4f},per_launch_us={ms / count * 1e3:.2f}", flush=True)
        return
    if compare == "torch" and mode == "P" and not C.torch_available():
        print("# --compare=torch: PyTorch is not installed (pip install torch); timing pydnnl "
              "only", flush=True)
        compare = None
    try:
        failed = C.run(eng, p, o, mode, compare, min_seconds, raise_unimplemented=True)
    except (unimplemented, out_of_memory) as e:
        print(f"skip,unimplemented,{o.to_str()},{p.to_str()},{e}", flush=True)
        summary.report(S.UNIMPLEMENTED, str(e), repro)
        return
    except invalid_arguments as e:
        summary.report(S.INVALID_ARGUMENTS, str(e), repro)
        return
    if mode == "C":
        summary.report(S.FAILED if failed else S.PASSED, "", repro)
