"""oneDNN's own benchdnn input files, unchanged, through ``python -m pydnnl.benchdnn``.

The files under ``tests/benchdnn/inputs/`` are oneDNN's CI lists (see its README). Each runs
in a child process (a crash of the OpenCL compiler must fail the test, not end the session)
with ``--mode=C``; the summary line must say ``failed:0`` and every problem must have one of
benchdnn's statuses. The conv and deconv lists run on a documented subset of their shapes
(``--match``); docs/status.md gives the long run over every shape.
"""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pydnnl.benchdnn import inputs, status
from pydnnl.benchdnn.cases import rnn_invalid
from pydnnl.benchdnn.rnn import RnnOptions, parse_problem

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_cli import engine_arg, main  # noqa: E402

INPUTS = Path(__file__).parent / "inputs"
SUMMARY = re.compile(r"tests:(\d+) passed:(\d+) skipped:(\d+) mistrusted:(\d+) "
                     r"unimplemented:(\d+) invalid_arguments:(\d+) failed:(\d+) listed:(\d+)")


def _run(*argv: str) -> tuple[int, str, dict[str, int]]:
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-m", "pydnnl.benchdnn", engine_arg(), *argv],
                          capture_output=True, text=True, env=env, timeout=1200)
    out = proc.stdout + proc.stderr
    m = SUMMARY.search(out)
    assert m, out[-3000:]
    keys = ("tests", "passed", "skipped", "mistrusted", "unimplemented", "invalid_arguments",
            "failed", "listed")
    return proc.returncode, out, dict(zip(keys, map(int, m.groups())))


# (driver, input file, --match subset or "")
CI_RUNS = [
    ("rnn", "rnn/test_lstm_ci", ""),
    ("rnn", "rnn/test_gru_ci", ""),
    ("rnn", "rnn/test_augru_ci", ""),
    ("rnn", "rnn/test_rnn_ci", ""),
    # 6 of the 18 2-D shapes, one per family with its channel tail or stride (every data type,
    # direction, layout and post-op of the list runs on each); the others and 1-D, 3-D: the
    # long run (docs/status.md)
    ("conv", "conv/test_conv_ci",
     "conv_basic_2d:(1st_stride_tail|1x1_tail|3x3_stride_tail|gemm_tail|grouped_stride_tail"
     "|depthwise_tail)"),
    # 6 of the 48 shapes (about 2 minutes on 2 shared cores with int8 running): 1-D, 2-D and 3-D,
    # channel tails, the kernel-less-than-padding "gemm" case, groups and depthwise; every
    # direction, layout and post-op of the list runs on each
    ("deconv", "deconv/test_deconv_ci",
     "deconv_ci_1d:(tail_1st|oc_tail_gemm)|deconv_ci_2d:(1x1|ic_tail_grouped|tail_depthwise)"
     "|deconv_ci_3d:ic_tail_1x1"),
]


@pytest.mark.parametrize("driver, path, match", CI_RUNS, ids=[r[1] for r in CI_RUNS])
def test_onednn_ci_list_runs_unchanged(driver, path, match):
    argv = [f"--{driver}", "--mode=C"] + ([f"--match={match}"] if match else [])
    rc, out, n = _run(*argv, f"--batch={INPUTS / path}")
    failed = [ln for ln in out.splitlines() if re.match(r"\d+:FAILED", ln)]
    assert n["failed"] == 0 and rc == 0, "\n".join(failed[:20]) or out[-3000:]
    statuses = re.findall(r"^\d+:([A-Z_]+)", out, re.M)
    assert len(statuses) == n["tests"] == n["listed"] > 0
    assert n["passed"] + n["skipped"] + n["unimplemented"] + n["invalid_arguments"] == n["tests"]
    assert n["passed"] > 0
    if driver == "deconv":  # every forward and backward direction is checked, bias included
        for d in ("FWD_B", "FWD_D", "BWD_D", "BWD_W", "BWD_WB"):
            assert re.search(rf"^\d+:PASSED __REPRO: --deconv .*--dir={d} ", out, re.M), d
        # int8 inference (u8/s8 src, s8 weights) runs and passes, zero points included
        for dts in ("u8:s8:s32", "s8:s8:f32"):
            assert re.search(rf"^\d+:PASSED __REPRO: --deconv .*--dir=FWD_I .*--dt={dts} ",
                             out, re.M), dts
        assert re.search(r"^\d+:PASSED __REPRO: --deconv .*--dt=(s8:s8:s8|u8:s8:s32) .*"
                         r"--attr-zero-points=src:common:31", out, re.M)
    for ln in out.splitlines():  # a SKIPPED carries oneDNN's reason, an UNIMPLEMENTED ours
        if re.match(r"\d+:(SKIPPED|UNIMPLEMENTED) ", ln):
            assert re.match(r"\d+:[A-Z]+ \(.+\) __REPRO: ", ln), ln


def test_value_lists_continuations_and_nested_batches(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "shapes").write_text('# shapes\nl1t2mb2_sic4_n"a_b"\n')
    (sub / "list").write_text("--reset\n--alg=VANILLA_LSTM,LBR_GRU\n--direction=left2right, \\\n"
                              "            concat\n--batch=shapes\n")
    toks = inputs.file_tokens(sub / "list")
    assert toks == ["--reset", "--alg=VANILLA_LSTM,LBR_GRU", "--direction=left2right,concat",
                    'l1t2mb2_sic4_n"a_b"']
    combos = inputs.expand({"alg": "VANILLA_LSTM,LBR_GRU", "post": ", sum:0.5"})
    assert combos == [{"alg": "VANILLA_LSTM", "post": ""},
                      {"alg": "VANILLA_LSTM", "post": "sum:0.5"},
                      {"alg": "LBR_GRU", "post": ""}, {"alg": "LBR_GRU", "post": "sum:0.5"}]
    rc, out, n = _run("--rnn", "--mode=C", f"--batch={sub / 'list'}")
    assert rc == 0 and n["passed"] == 4 and n["tests"] == 4, out
    assert 'n"a_b"' in out  # names keep their underscores


def test_skip_rules_follow_onednn():
    assert rnn_invalid(parse_problem("l1t1mb7_sic17_dhc34"), RnnOptions(alg="LBR_GRU")) \
        == "GRU with sic != dic"
    assert rnn_invalid(parse_problem("l1t1mb7_sic17_dhc34"), RnnOptions(alg="VANILLA_LSTM")) == ""
    assert "AUGRU" in rnn_invalid(parse_problem("l8t3mb12_sic16"), RnnOptions(alg="LBR_AUGRU"))
    assert "projection" in rnn_invalid(parse_problem("l1t1mb9_sic16_dic32"),
                                       RnnOptions(alg="VANILLA_LSTM"))


def test_summary_line(capsys):
    s = status.Summary()
    s.report(status.PASSED, "", "--rnn x")
    s.report(status.SKIPPED, "Invalid case: why", "--rnn y")
    out = capsys.readouterr().out
    assert out.splitlines() == ["0:PASSED __REPRO: --rnn x",
                                "1:SKIPPED (Invalid case: why) __REPRO: --rnn y"]
    assert s.line() == ("tests:2 passed:1 skipped:1 mistrusted:0 unimplemented:0 "
                        "invalid_arguments:0 failed:0 listed:2")


def test_bad_option_values_name_the_option():
    with pytest.raises(SystemExit) as e:
        main(["--rnn", "--with-peephole=maybe", "l1t1mb2sic4"])
    assert "--with-peephole" in str(e.value.code) and "maybe" in str(e.value.code)


@pytest.mark.parametrize("argv", [
    ["--conv", "--dir=FWD_B,BWD_D,BWD_WB", "--seed=3", "--random=12"],
    ["--rnn", "--alg=VANILLA_LSTM,LBR_GRU,VANILLA_AUGRU", "--prop=FWD_D,BWD_DW", "--seed=3",
     "--random=4"],
])
def test_seeded_random_sample(argv):
    """A small sample of the documented long run (docs/status.md): every problem passes or
    is one oneDNN calls invalid (AUGRU with two layers)."""
    rc, out, n = _run("--mode=C", *argv)
    assert rc == 0 and n["failed"] == 0 and n["passed"] > 0, out[-3000:]
    assert n["passed"] + n["skipped"] == n["tests"], out[-3000:]
