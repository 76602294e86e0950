"""python -m pydnnl.benchdnn: problem parsing, correctness mode, performance lines."""
from __future__ import annotations

import pathlib
import re
import sys

import pytest

from pydnnl.benchdnn.rnn import parse_problem

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_cli import main  # noqa: E402


def test_rnn_problem_defaults_follow_benchdnn():
    p = parse_problem('l2t5mb3sic16n"x"')
    assert (p.l, p.t, p.mb, p.sic, p.slc, p.dhc, p.dic, p.name) == (2, 5, 3, 16, 16, 16, 16, "x")
    p = parse_problem("l1t50_mb64_sic512slc1024dhc256")
    assert (p.slc, p.dhc, p.dic) == (1024, 256, 256)
    assert parse_problem(p.to_str()) == p


@pytest.mark.parametrize("bad", ["l1t5mb3", "l1t5mb3sicx", "sic16foo", "l1t5mb3sic16dic"])
def test_rnn_problem_rejects_bad_strings(bad):
    with pytest.raises(ValueError):
        parse_problem(bad)


def test_correctness_mode_passes_against_the_reference(capsys):
    rc = main(["--rnn", "--mode=C", "--alg=VANILLA_LSTM", "--direction=concat", "l2t3mb2sic6",
               "--alg=LBR_GRU", "--direction=sum", "l1t3mb2sic5slc7",
               "--alg=VANILLA_RNN", "--activation=RELU", "l1t2mb2sic4",
               "--gemm", "17x33x9"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("check,passed") == 4 and "FAILED" not in out


def test_performance_lines_and_batch_file(tmp_path, capsys):
    batch = tmp_path / "list.txt"
    batch.write_text("# a comment\n--alg=VANILLA_GRU --prop=FWD_D\nl1t3mb2sic8n\"tiny\"\n")
    rc = main(["--rnn", "--min-seconds=0", f"--batch={batch}", "--prop=BWD_DW", "l1t2mb2sic4",
               "--gemm", "--min-seconds=0", "--compare=numpy", "8x8x8"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = [ln for ln in out.splitlines() if ln.startswith("perf,")]
    assert len(lines) == 3, out
    assert "VANILLA_GRU" in lines[0] and "FWD_D" in lines[0] and 'n"tiny"' in lines[0]
    assert "BWD_DW" in lines[1]
    for ln in lines:
        assert re.search(r"median_ms=[0-9.]+", ln) and re.search(r"gflops=[0-9.]+", ln)
    assert "numpy_ms=" in lines[2]


def test_sequence_lengths_option(capsys):
    rc = main(["--rnn", "--mode=C", "--seq-lengths=3:1:2", "--direction=right2left", "l1t3mb3sic4",
               "--seq-lengths=spread", "--direction=concat", "l2t4mb5sic6"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("check,passed") == 2 and "--seq-lengths=spread" in out


def test_kernel_profile_mode_counts_launches(capsys):
    """--mode=K lists every kernel with its launches: this small problem's forward runs its
    recurrence in one launch (the one-group form), its backward one cell kernel per step."""
    rc = main(["--rnn", "--mode=K", "--alg=VANILLA_LSTM", "--prop=BWD_DW", "l1t5mb3sic8"])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = {}
    for ln in out.splitlines():
        if ln.startswith("kernel,"):
            f = ln.split(",")
            vals = dict(kv.split("=", 1) for kv in f[-3:])
            rows[(f[3], f[4])] = (int(vals["launches"]), float(vals["total_ms"]))
    fwd = [n for (k, _), (n, _) in rows.items() if k == "pydnnl_rnn_persist_vanilla_lstm"]
    bwd = [n for (k, _), (n, _) in rows.items() if k == "rnn_bwd_vanilla_lstm_s0"]
    assert not any(k == "rnn_vanilla_lstm_s0" for k, _ in rows), out  # no per-step cells
    assert fwd == [1] and bwd == [5], out  # one layer; T = 5 backward steps
    assert all(ms >= 0 for _, ms in rows.values())


def test_create_mode_times_a_fresh_process(capsys):
    """--mode=CREATE: one ``create`` line per problem whose times come from a second Python
    process that created the same primitives (and parsed the same problem string)."""
    rc = main(["--rnn", "--mode=CREATE", "--alg=VANILLA_LSTM", "--prop=BWD_DW", "l1t3mb2sic4",
               "l1t5mb3sic4"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = [ln for ln in out.splitlines() if ln.startswith("create,")]
    assert len(lines) == 2 and "l1t3mb2sic4" in lines[0] and "l1t5mb3sic4" in lines[1]
    for ln in lines:
        fields = dict(f.split("=", 1) for f in ln.split(",")[2:])
        assert float(fields["fresh_process_create_ms"]) > 0
        assert float(fields["create_ms"]) > 0 and float(fields["import_ms"]) > 0
        # the fresh process finds every source this one generated (or found) in the cache
        assert int(fields["fresh_generated"]) == 0 and float(fields["fresh_generate_ms"]) == 0
        assert int(fields["fresh_built"]) + int(fields["fresh_loaded"]) > 0
    assert "passed:2" in out


def test_conv_create_mode_reports_kernel_costs(capsys):
    """--conv --mode=CREATE: one ``create`` line per direction with the creation time and the
    kernels it generated, compiled or loaded (a second creation in this process makes none)."""
    args = ["--conv", "--mode=CREATE", "--dir=FWD_B,BWD_D", "mb1ic4ih6oc4oh6kh3ph1"]
    assert main(args) == 0
    assert main(args) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("create,")]
    assert len(lines) == 4
    for i, ln in enumerate(lines):
        fields = dict(f.split("=", 1) for f in ln.split(",")[2:])
        assert float(fields["create_ms"]) > 0
        made = int(fields["generated"]) + int(fields["built"]) + int(fields["loaded"])
        if i >= 2:  # the same problems again: the kernels are in this process's memory
            assert made == 0 and float(fields["generate_ms"]) == 0


def test_conv_kernel_profile_mode(capsys):
    """--conv --mode=K: an explicit-GEMM 1x1 backward data (im2col_gemm pinned) runs one GEMM
    launch and no im2col (a 1x1 stride-1 convolution reads its data as the GEMM operand)."""
    rc = main(["--conv", "--mode=K", "--dir=BWD_D", "--alg=im2col_gemm",
               "mb2ic8ih5oc16oh5kh1ph0"])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = [ln.split(",") for ln in out.splitlines() if ln.startswith("kernel,")]
    names = [f[3] for f in rows]
    assert names.count("gemm") == 1, out
    assert all(int(f[-3].split("=")[1]) >= 1 and float(f[-2].split("=")[1]) >= 0
               for f in rows), out


def test_ip_kernel_profile_mode(capsys):
    """--ip --mode=K: backward weights with a bias runs its GEMM and one column-sum launch
    (diff_bias), and says which implementation ran."""
    rc = main(["--ip", "--mode=K", "--dir=BWD_WB", "mb8ic16oc4"])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = [ln.split(",") for ln in out.splitlines() if ln.startswith("kernel,")]
    names = [f[4] for f in rows]
    assert names.count("gemm") == 1 and names.count("pydnnl_colsum") == 1, out
    assert all(f[3].startswith("impl=gemm") for f in rows), out
