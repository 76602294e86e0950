"""Models exported by ``torch.onnx.export`` (skipped when torch is absent) run through
:mod:`pydnnl.onnx` and match onnx's reference evaluator and torch itself. The exported
LSTM carries the exporter's shape arithmetic (Shape, Gather, Unsqueeze, Concat, Expand for the
zero initial states), folded on the host when the program is built."""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is optional (pip install torch)")

import onnx  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from pydnnl.onnx import PydnnlBackend  # noqa: E402


class _Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2, groups=2)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.c1(x))), 2)
        x = torch.nn.functional.gelu(self.c2(x))     # exported as Div, Erf, Add, Mul, Mul
        x = torch.nn.functional.adaptive_avg_pool2d(torch.tanh(x), 1)
        return torch.log_softmax(self.fc(torch.flatten(x, 1)), -1)


class _Lstm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 6, bidirectional=True)
        self.fc = torch.nn.Linear(12, 3)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.fc(y[-1])


def _export(module, x):
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), f, opset_version=17, dynamo=False)
    return onnx.load_from_string(f.getvalue())


@pytest.mark.parametrize("make,shape", [(_Cnn, (2, 3, 16, 16)), (_Lstm, (5, 2, 4))],
                         ids=["cnn", "lstm"])
def test_exported_model(make, shape):
    torch.manual_seed(0)
    module = make().eval()
    x = torch.randn(*shape)
    model = _export(module, x)
    feeds = {model.graph.input[0].name: x.numpy()}
    got, = PydnnlBackend.run_model(model, feeds)
    want, = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        np.testing.assert_allclose(got, module(x).numpy(), rtol=1e-4, atol=1e-5)
