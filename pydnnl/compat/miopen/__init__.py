"""MIOpen's C API on pydnnl primitives, for porting MIOpen programs by search and replace.

    from pydnnl.compat import miopen
    h = miopen.miopenCreate()
    x_desc = miopen.miopenCreateTensorDescriptor()
    miopen.miopenSet4dTensorDescriptor(x_desc, miopen.miopenFloat, 1, 3, 8, 8)
    ws_size = miopen.miopenConvolutionForwardGetWorkSpaceSize(h, w_desc, x_desc, conv, y_desc)

Same names and argument order as MIOpen; output pointers are returned instead of passed;
``NULL`` is ``None``; device memory is any :class:`pydnnl.memory` on ``handle.engine``;
failures raise :class:`MIOpenError` carrying MIOpen's ``miopenStatus_t``. See
``docs/compat_miopen.md``.
"""
from . import _common, _conv, _enums, _rnn
from ._common import *  # noqa: F401,F403
from ._conv import *  # noqa: F401,F403
from ._enums import *  # noqa: F401,F403
from ._rnn import *  # noqa: F401,F403

__all__ = [*_enums.__all__, *_common.__all__, *_conv.__all__, *_rnn.__all__]
