"""Peer API surfaces: other libraries' names, packings and call conventions, translated into
pydnnl primitives."""
