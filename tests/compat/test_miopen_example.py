"""examples/miopen_many_to_one_digits.py: the many-to-one LSTM trained through the MIOpen API
reaches the accuracy its docstring promises (>= 95 % on the held-out digits)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "miopen_many_to_one_digits.py"


def test_many_to_one_digits_reaches_95_percent(capsys):
    spec = importlib.util.spec_from_file_location("miopen_many_to_one_digits", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    accuracy = example.main([])
    out = capsys.readouterr().out
    assert "final test accuracy" in out
    assert accuracy >= 0.95, out
