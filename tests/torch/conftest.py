"""pydnnl.torch tests: PyTorch is optional, so the whole directory skips without it."""
import pytest

pytest.importorskip("torch", reason="pydnnl.torch needs PyTorch (pip install 'pydnnl[torch]')")
