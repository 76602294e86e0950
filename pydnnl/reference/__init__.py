"""Plain numpy reference implementations of pydnnl's primitives (tests, benchdnn correctness)."""
