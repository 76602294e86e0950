"""pydnnl.torch tests: PyTorch is optional, so each module skips without it (its first line).

(The directory is not named ``torch``: pytest puts ``tests/`` on ``sys.path``, where a
``torch`` folder would import as an empty namespace package wherever PyTorch is absent.)

The modules run on the CPU engine; ``PYDNNL_TORCH_TEST_ENGINE=gpu`` runs them on a GPU
engine instead (the tensors stay PyTorch CPU tensors: each call takes one copy each way)."""
import os

import pytest

import pydnnl as dnnl


@pytest.fixture(scope="module")
def eng():
    kind = os.environ.get("PYDNNL_TORCH_TEST_ENGINE", "cpu")
    e = dnnl.engine(dnnl.engine.kind[kind], 0)
    if kind != "cpu":  # modules made without engine= too
        import pydnnl.torch as pt

        pt.set_default_engine(e)
    return e
