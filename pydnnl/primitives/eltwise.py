"""The eltwise primitives (in progress)."""
__all__: list[str] = []
