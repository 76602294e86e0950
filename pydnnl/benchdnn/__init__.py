"""A benchmark and correctness driver modeled on oneDNN's benchdnn:
``python -m pydnnl.benchdnn``."""
