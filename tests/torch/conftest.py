"""pydnnl.torch tests: PyTorch is optional, so the whole directory skips without it.

The modules run on the CPU engine; ``PYDNNL_TORCH_TEST_ENGINE=gpu`` runs them on a GPU
engine instead (the tensors stay PyTorch CPU tensors: each call takes one copy each way)."""
import os

import pytest

pytest.importorskip("torch", reason="pydnnl.torch needs PyTorch (pip install 'pydnnl[torch]')")

import pydnnl as dnnl  # noqa: E402


@pytest.fixture(scope="module")
def eng():
    kind = os.environ.get("PYDNNL_TORCH_TEST_ENGINE", "cpu")
    e = dnnl.engine(dnnl.engine.kind[kind], 0)
    if kind != "cpu":  # modules made without engine= too
        import pydnnl.torch as pt

        pt.set_default_engine(e)
    return e
