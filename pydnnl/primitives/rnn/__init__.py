"""RNN primitives (oneDNN's vanilla RNN, LSTM, GRU, LBR-GRU, AUGRU, LBR-AUGRU)."""
from .backward import (
                       augru_backward,
                       gru_backward,
                       lbr_augru_backward,
                       lbr_gru_backward,
                       lstm_backward,
                       vanilla_rnn_backward,
)
from .forward import (
                       augru_forward,
                       gru_forward,
                       lbr_augru_forward,
                       lbr_gru_forward,
                       lstm_forward,
                       vanilla_rnn_forward,
)

__all__ = ["vanilla_rnn_forward", "lstm_forward", "gru_forward", "lbr_gru_forward",
           "augru_forward", "lbr_augru_forward", "vanilla_rnn_backward", "lstm_backward",
           "gru_backward", "lbr_gru_backward", "augru_backward", "lbr_augru_backward"]
