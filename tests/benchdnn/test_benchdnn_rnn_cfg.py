"""benchdnn --rnn --cfg: oneDNN's int8 and bf16/f16 data type configurations, checked against
the float64 references; benchdnn's own skips for int8 problems it does not run."""
from __future__ import annotations

import pathlib
import re
import sys

import pytest

from pydnnl.benchdnn.rnn import CFGS, int8_cfg

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_cli import main  # noqa: E402


def test_cfg_names_follow_onednn():
    # tests/benchdnn/rnn/cfg.cpp: src_iter, src_layer, dst_iter, dst_layer
    assert CFGS["f32u8f32u8"]["src_iter"] == "f32" and CFGS["f32u8f32u8"]["dst_layer"] == "u8"
    assert CFGS["u8u8u8f32"]["dst_iter"] == "u8" and CFGS["u8u8u8f32"]["dst_layer"] == "f32"
    assert CFGS["s8s8s8s8"]["weights"] == "s8" and CFGS["s8s8s8s8"]["bias"] == "f32"
    assert CFGS["bf16f32"]["bias"] == "f32" and CFGS["bf16"]["bias"] == "bf16"
    assert CFGS["bf16"]["peephole"] == "f32"
    assert int8_cfg("f32s8f32f32") == "s8" and int8_cfg("bf16") is None


def test_int8_and_bf16_cfgs_pass(capsys):
    rc = main(["--rnn", "--mode=C", "--alg=VANILLA_LSTM", "--direction=left2right,sum",
               "--with-projection=true", "--cfg=u8u8u8f32,f32s8f32s8", "--scaling=per_oc",
               "l1t3mb2sic6slc8dhc8dic6",
               "--with-projection=false", "--alg=VANILLA_GRU", "--direction=concat",
               "--cfg=f32u8f32u8", "--scaling=common", "l2t2mb3sic8",
               "--cfg=bf16,f16f32", "--prop=FWD_D", "l1t2mb2sic8"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("check,passed") == 7 and "FAILED" not in out
    assert "tolerance=1 step" in out  # the int8 criterion


def test_int8_skips_and_refusals(capsys):
    rc = main(["--rnn", "--mode=C", "--cfg=u8u8u8u8", "--alg=VANILLA_LSTM", "--prop=BWD_DW",
               "l1t2mb2sic4", "--prop=FWD_I", "--alg=LBR_GRU", "l1t2mb2sic4",
               "--alg=VANILLA_GRU", "--cfg=s8s8s8s8", "l1t2mb2sic4",
               "--alg=VANILLA_LSTM", "--cfg=u8u8u8u8", "--with-peephole=true", "l1t2mb2sic4"])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = re.findall(r"^\d+:(\w+) \(([^)]*)\)", out, re.M)
    assert [s for s, _ in lines] == ["SKIPPED", "SKIPPED", "UNIMPLEMENTED", "UNIMPLEMENTED"]
    assert "forward inference only" in lines[0][1] and "LSTM and GRU only" in lines[1][1]
    assert "LSTM only" in lines[2][1] and "peephole" in lines[3][1]


def test_unknown_cfg_is_refused():
    with pytest.raises(SystemExit, match="--cfg"):
        main(["--rnn", "--mode=C", "--cfg=u8u8", "l1t2mb2sic4"])


def test_torch_peer_runs_the_same_configuration():
    """--compare=torch times PyTorch in the configuration's precision: autocast for bf16/f16,
    dynamic int8 quantization for int8 LSTM inference on a CPU, nothing it cannot match."""
    from pydnnl.benchdnn.rnn import RnnOptions, torch_peer

    assert torch_peer(RnnOptions(cfg="f32")) == "f32"
    for cfg, mode in (("bf16", "autocast_bf16"), ("bf16f32", "autocast_bf16"),
                      ("f16", "autocast_f16"), ("f16f32", "autocast_f16")):
        assert torch_peer(RnnOptions(cfg=cfg, prop="BWD_DW"), "cuda") == mode
    assert torch_peer(RnnOptions(cfg="u8u8u8u8")) == "dynamic_qint8"
    assert torch_peer(RnnOptions(cfg="f32s8f32f32")) == "dynamic_qint8"
    assert torch_peer(RnnOptions(cfg="u8u8u8u8"), "cuda") is None  # quantized ops: CPU only
    assert torch_peer(RnnOptions(cfg="u8u8u8u8", alg="VANILLA_GRU")) is None
    assert torch_peer(RnnOptions(cfg="u8u8u8u8", prop="FWD_D")) is None
