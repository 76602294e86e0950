"""The sum primitives (in progress)."""
__all__: list[str] = []
