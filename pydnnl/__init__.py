"""pydnnl: oneDNN-style deep-learning primitives for any OpenCL device, generated with loopy.

    import pydnnl as dnnl
    eng = dnnl.engine(dnnl.engine.kind.cpu, 0)
    s = dnnl.stream(eng)
    md = dnnl.memory.desc([2, 3], dnnl.memory.data_type.f32, dnnl.memory.format_tag.ab)
"""
from __future__ import annotations

from . import _icd

_icd.ensure_icd()  # before anything queries OpenCL platforms

from . import constants as _constants  # noqa: E402
from .attr import post_ops, primitive_attr  # noqa: E402
from .constants import *  # noqa: E402,F401,F403
from .constants import (  # noqa: E402
    algorithm,
    fpmath_mode,
    normalization_flags,
    prop_kind,
    query,
    rnn_direction,
    rnn_flags,
    scratchpad_mode,
)
from .engine import DeviceInfo, engine  # noqa: E402
from .error import error, invalid_arguments, out_of_memory, runtime_error, unimplemented  # noqa: E402
from .memory import memory  # noqa: E402
from .memory.data_types import data_type  # noqa: E402
from .memory.desc import MemoryDesc, format_kind  # noqa: E402
from .memory.format_tags import format_tag  # noqa: E402
from .primitives import *  # noqa: E402,F401,F403  (eltwise, softmax, binary, sum, ...)
from .primitives import (  # noqa: E402  # noqa: E402
    ConvFindResult,
    augru_backward,
    augru_forward,
    convolution_backward_data,
    convolution_backward_weights,
    convolution_forward,
    deconvolution_backward_data,
    deconvolution_backward_weights,
    deconvolution_forward,
    gru_backward,
    gru_forward,
    inner_product_backward_data,
    inner_product_backward_weights,
    inner_product_forward,
    lbr_augru_backward,
    lbr_augru_forward,
    lbr_gru_backward,
    lbr_gru_forward,
    lstm_backward,
    lstm_forward,
    matmul,
    primitive,
    primitive_desc_base,
    reorder,
    vanilla_rnn_backward,
    vanilla_rnn_forward,
)
from .primitives.rnn.extensions import rnn_extensions  # noqa: E402
from .runtime.fpmath import get_default_fpmath_mode, set_default_fpmath_mode  # noqa: E402
from .stream import stream  # noqa: E402

_constants.export_dnnl_aliases(globals())

__version__ = "0.1.0"

from . import compat  # noqa: E402,F401  (pydnnl.compat.miopen / .mxnet after `import pydnnl`)
