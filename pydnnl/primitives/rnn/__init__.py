"""RNN primitives (oneDNN's vanilla RNN, LSTM, GRU, LBR-GRU, AUGRU, LBR-AUGRU)."""
from .forward import (augru_forward, gru_forward, lbr_augru_forward, lbr_gru_forward,
                      lstm_forward, vanilla_rnn_forward)

__all__ = ["vanilla_rnn_forward", "lstm_forward", "gru_forward", "lbr_gru_forward",
           "augru_forward", "lbr_augru_forward"]
