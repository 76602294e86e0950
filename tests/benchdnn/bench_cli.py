"""benchdnn's command line as the tests call it: on the first device present, whatever its kind
(the CLI's default engine is the CPU, which a GPU-only machine lacks)."""
from __future__ import annotations

import pydnnl as dnnl
from pydnnl.benchdnn.__main__ import main as _main


def engine_arg() -> str:
    """``--engine=cpu`` where a CPU device exists, else ``--engine=gpu`` (the kind of the
    first device, as the ``engine`` fixture orders them); creates no engine."""
    has_cpu = dnnl.engine.get_count(dnnl.engine.kind.cpu) > 0
    return f"--engine={'cpu' if has_cpu else 'gpu'}"


def main(argv: list[str]) -> int:
    """``python -m pydnnl.benchdnn`` in this process, on the first device present."""
    return _main([engine_arg(), *argv])
