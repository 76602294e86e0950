"""numpy float64 oracle of the optimizer-update primitives, written from the update rules of
PyTorch's ``torch.optim.SGD`` and ``torch.optim.Adam`` documentation (dampening 0, no AMSGrad,
weight decay as an L2 term added to the gradient). Each function returns new arrays and leaves
its arguments alone.
"""
from __future__ import annotations

import numpy as np


def sgd_update(param, grad, learning_rate: float, momentum: float = 0.0,
               weight_decay: float = 0.0, nesterov: bool = False, velocity=None):
    """``(param, velocity)`` after one SGD step (``velocity`` None without momentum)."""
    p = np.asarray(param, np.float64)
    g = np.asarray(grad, np.float64) + weight_decay * p
    if momentum == 0:
        return p - learning_rate * g, None
    b = momentum * np.asarray(velocity, np.float64) + g
    step = g + momentum * b if nesterov else b
    return p - learning_rate * step, b


def adam_update(param, grad, m, v, t: int, learning_rate: float = 1e-3, beta1: float = 0.9,
                beta2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.0):
    """``(param, m, v)`` after Adam's step number ``t`` (1 at the first step)."""
    p = np.asarray(param, np.float64)
    g = np.asarray(grad, np.float64) + weight_decay * p
    m = beta1 * np.asarray(m, np.float64) + (1 - beta1) * g
    v = beta2 * np.asarray(v, np.float64) + (1 - beta2) * g * g
    m_hat = m / (1 - beta1 ** t)
    v_hat = v / (1 - beta2 ** t)
    return p - learning_rate * m_hat / (np.sqrt(v_hat) + eps), m, v
