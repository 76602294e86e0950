"""The buffers a convolution plan names, bound at execution by role: the pd maps each
``ARG_*`` of its direction to one (backward data writes ``src``, backward weights ``wei``)."""
from __future__ import annotations

from ...runtime.plan import Ref

SRC, WEI, DST, BIAS = (Ref(r) for r in ("src", "wei", "dst", "bias"))
