"""``PYDNNL_VERBOSE=1``: one line per primitive creation and execution, like ONEDNN_VERBOSE."""
from __future__ import annotations

import os
import sys


def enabled() -> bool:
    return os.environ.get("PYDNNL_VERBOSE", "0") not in ("", "0")


def line(action: str, kind: str, impl: str, mds: str, info: str, ms: float) -> None:
    """``pydnnl_verbose,<create|exec>,<kind>,<impl>,<descs>,<problem>,<ms>``."""
    print(f"pydnnl_verbose,{action},{kind},{impl},{mds},{info},{ms:.4f}", file=sys.stdout,
          flush=True)
