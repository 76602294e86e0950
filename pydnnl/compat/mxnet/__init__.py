"""MXNet's functional RNN operator (``mxnet.npx.rnn``) on pydnnl primitives.

    from pydnnl.compat import mxnet
    n = mxnet.rnn_param_size("lstm", input_size, state_size, num_layers, bidirectional)
    out, hy, cy = mxnet.rnn(x, params, h0, c0, mode="lstm", state_size=..., num_layers=...,
                            state_outputs=True)
"""
from ._packing import RnnPacking, rnn_param_size
from ._rnn import cache_clear as rnn_cache_clear
from ._rnn import cache_info as rnn_cache_info
from ._rnn import rnn

__all__ = ["rnn", "rnn_param_size", "rnn_cache_info", "rnn_cache_clear", "RnnPacking"]
