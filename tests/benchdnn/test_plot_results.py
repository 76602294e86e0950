"""benchmarks/plot_results.py reads the ratio of every driver's perf lines (the plot itself
needs matplotlib, which the tests do not)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("plot_results",
                                                  ROOT / "benchmarks" / "plot_results.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_reads_rnn_and_conv_perf_lines(tmp_path):
    f = tmp_path / "out.txt"
    f.write_text(
        "# a comment\n"
        'perf,--rnn --mode=P --alg=VANILLA_LSTM --prop=FWD_I l1t50mb64sic512n"lstm_512",'
        "create_ms=10.0,min_ms=1.004,median_ms=1.081,torch_ms=1.213,speed_vs_torch=1.12x\n"
        'perf,--rnn --mode=P --alg=VANILLA_LSTM --prop=BWD_DW l1t50mb64sic512n"lstm_512",'
        "min_ms=2.0,median_ms=2.1,torch_ms=1.8,speed_vs_torch=0.90x\n"
        'perf,--rnn --mode=P --prop=FWD_I l1t5mb1sic32n"tiny",min_ms=1.0,torch=n/a\n'
        'perf,--dir=BWD_WB --alg=auto,g1mb32ic3ih224oc64oh112kh7sh2ph3n"resnet_50:conv1",'
        "solver=im2col_gemm,min_ms=0.725,torch_min_ms=0.506,ratio=0.70\n"
        'perf,--dir=FWD_B --alg=auto,mb32ic128ih56oc128oh28kh3sh2ph1'
        'n"resnet_50_v1_5:res3a_branch2b",solver=im2col_gemm,min_ms=0.237,ratio=1.10\n')
    assert _module().read_perf(str(f)) == [
        ("lstm_512", 1.12), ("lstm_512 fwd+bwd", 0.90), ("conv1", 0.70),
        ("v1.5 res3a_branch2b", 1.10)]
