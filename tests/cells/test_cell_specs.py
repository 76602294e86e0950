"""The cell specs against oneDNN's documented facts (gate counts and orders, bias gates:
``rnn.cpp::get_gates_count`` and the RNN guide), and the spec facts plans branch on."""
from __future__ import annotations

import pytest

from pydnnl.cells import CELLS, get_cell

# oneDNN: cell -> (gates, gate order, bias gates)
ONEDNN = {
    "vanilla_rnn": (1, None, 1),
    "vanilla_lstm": (4, ("i", "f", "c_tilde", "o"), 4),
    "vanilla_gru": (3, ("u", "r", "o"), 3),
    "lbr_gru": (3, ("u", "r", "o"), 4),
    "vanilla_augru": (3, ("u", "r", "o"), 3),
    "lbr_augru": (3, ("u", "r", "o"), 4),
}


def test_every_onednn_cell_kind_has_a_spec():
    assert set(CELLS) == set(ONEDNN)


@pytest.mark.parametrize("name", sorted(ONEDNN))
def test_gates_match_onednn(name):
    spec = get_cell(name)
    gates, order, bias = ONEDNN[name]
    assert spec.n_gates == len(spec.gate_names) == gates
    if order is not None:
        assert spec.gate_names == order
    assert spec.n_bias_gates == len(spec.bias_gates) == bias
    assert all(b.gate in spec.gate_names for b in spec.bias_gates)
    assert get_cell(spec.alg_kind) is spec


@pytest.mark.parametrize("name", sorted(ONEDNN))
def test_spec_facts(name):
    """What the plans read instead of cell names: a cell state (LSTM), linear-before-reset
    (a bias on a recurrent GEMM's result), a reset product feeding a GEMM (GRU, AUGRU),
    attention (AUGRU)."""
    spec = get_cell(name)
    assert spec.has_cell_state == (name == "vanilla_lstm")
    assert spec.linear_before_reset == name.startswith("lbr_")
    assert spec.reads_reset_state == (name in ("vanilla_gru", "vanilla_augru"))
    assert spec.has_attention == name.endswith("augru")
