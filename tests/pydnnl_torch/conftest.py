"""pydnnl.torch tests: PyTorch is optional, so each module skips without it (its first line).

(The directory is not named ``torch``: pytest puts ``tests/`` on ``sys.path``, where a
``torch`` folder would import as an empty namespace package wherever PyTorch is absent.)

The modules run on the CPU engine (a GPU engine where no CPU device exists);
``PYDNNL_TORCH_TEST_ENGINE=gpu`` runs them on a GPU engine instead (the tensors stay PyTorch
CPU tensors: each call takes one copy each way)."""
import os

import pytest

import pydnnl as dnnl


@pytest.fixture(scope="module")
def eng():
    # the CPU by default, a GPU where no CPU device exists
    has_cpu = dnnl.engine.get_count(dnnl.engine.kind.cpu) > 0
    kind = os.environ.get("PYDNNL_TORCH_TEST_ENGINE", "cpu" if has_cpu else "gpu")
    e = dnnl.engine(dnnl.engine.kind[kind], 0)
    if kind != "cpu":  # modules made without engine= too
        import pydnnl.torch as pt

        pt.set_default_engine(e)
    return e


@pytest.fixture(autouse=True)
def _default_engine_without_a_cpu():
    """Where no CPU device exists, modules made without ``engine=`` (whose default is the CPU
    engine) use the first GPU, in tests that take no ``eng`` too."""
    if dnnl.engine.get_count(dnnl.engine.kind.cpu) == 0:
        import pydnnl.torch as pt

        pt.set_default_engine(dnnl.engine(dnnl.engine.kind.gpu, 0))
