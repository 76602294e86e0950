"""Formulas shared by the GRU family (vanilla/LBR, with or without attention)."""
from __future__ import annotations

from pymbolic import var

from .spec import Assignment, RecurrentGemm, Stage, assign, gh, gx, logistic, tanh

GATES = ("u", "r", "o")


def _update(attention: bool) -> tuple[Assignment, ...]:
    u, o, h_prev = var("u"), var("o"), var("h_prev")
    if attention:
        ut = var("u_tilde")
        return (assign("u_tilde", (1 - var("att")) * u),
                assign("h", ut * h_prev + (1 - ut) * o))
    return (assign("h", u * h_prev + (1 - u) * o),)


def _gates_ur() -> tuple[Assignment, ...]:
    return (assign("u", logistic(gx("u") + gh("u"))),
            assign("r", logistic(gx("r") + gh("r"))))


def vanilla_stages(attention: bool) -> tuple[Stage, ...]:
    """o = tanh(W_o x + U_o (r h) + B_o): a second recurrent GEMM on rh = r h_prev."""
    return (
        Stage(RecurrentGemm("h_prev", ("u", "r")),
              _gates_ur() + (assign("rh", var("r") * var("h_prev")),)),
        Stage(RecurrentGemm("rh", ("o",)),
              (assign("o", tanh(gx("o") + gh("o"))),) + _update(attention)),
    )


def lbr_stages(attention: bool) -> tuple[Stage, ...]:
    """o = tanh(W_o x + B_o + r (U_o h + B_u')); gh_o includes the 4th bias gate B_u'."""
    return (
        Stage(RecurrentGemm("h_prev", GATES),
              _gates_ur() + (assign("o", tanh(gx("o") + var("r") * gh("o"))),)
              + _update(attention)),
    )
