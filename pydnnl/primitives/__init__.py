"""Primitive descriptors and primitives."""
from .base import ArgSpec, primitive, primitive_desc_base
from .reorder import reorder
from .rnn import (augru_forward, gru_forward, lbr_augru_forward, lbr_gru_forward, lstm_forward,
                  vanilla_rnn_forward)

__all__ = ["ArgSpec", "primitive", "primitive_desc_base", "reorder", "vanilla_rnn_forward",
           "lstm_forward", "gru_forward", "lbr_gru_forward", "augru_forward", "lbr_augru_forward"]
