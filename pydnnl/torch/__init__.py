"""``pydnnl.torch``: ``torch.nn`` modules that run on pydnnl primitives, with autograd.

Optional: needs PyTorch (``pip install "pydnnl[torch]"``); the core never imports it. Tensors
live where PyTorch keeps them; each call moves them to the module's pydnnl engine (no copy on a
CPU engine where the memory can be shared, one copy otherwise) and returns PyTorch tensors.
"""
from __future__ import annotations

try:
    import torch as _torch  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "pydnnl.torch needs PyTorch: pip install \"pydnnl[torch]\"") from e

from ._bridge import default_engine, set_default_engine  # noqa: E402,F401
