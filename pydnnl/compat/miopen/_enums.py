"""MIOpen's enumerations with MIOpen's numeric values (``miopen.h``).

Every enumerator is also a module attribute (``miopenFloat``, ``miopenLSTM``,
``miopenConvolutionFwdAlgoWinograd``), so C code ported by search and replace finds it.
"""
from __future__ import annotations

import enum


class miopenStatus_t(enum.IntEnum):
    """What a MIOpen call returns; :class:`MIOpenError` carries the failing ones."""

    miopenStatusSuccess = 0
    miopenStatusNotInitialized = 1
    miopenStatusInvalidValue = 2
    miopenStatusBadParm = 3
    miopenStatusAllocFailed = 4
    miopenStatusInternalError = 5
    miopenStatusNotImplemented = 6
    miopenStatusUnknownError = 7
    miopenStatusUnsupportedOp = 8
    miopenStatusGpuOperationsSkipped = 9
    miopenStatusVersionMismatch = 10


class miopenDataType_t(enum.IntEnum):
    """Tensor element types (value 4, the discontinued ``miopenInt8x4``, is unused)."""

    miopenHalf = 0
    miopenFloat = 1
    miopenInt32 = 2
    miopenInt8 = 3
    miopenBFloat16 = 5
    miopenDouble = 6
    miopenFloat8 = 7
    miopenBFloat8 = 8
    miopenInt64 = 9


# -- convolution ---------------------------------------------------------------------------------
class miopenConvolutionMode_t(enum.IntEnum):
    miopenConvolution = 0
    miopenTranspose = 1
    miopenGroupConv = 2   # deprecated: treated as miopenConvolution
    miopenDepthwise = 3   # deprecated: treated as miopenConvolution


class miopenConvFwdAlgorithm_t(enum.IntEnum):
    miopenConvolutionFwdAlgoGEMM = 0
    miopenConvolutionFwdAlgoDirect = 1
    miopenConvolutionFwdAlgoFFT = 2
    miopenConvolutionFwdAlgoWinograd = 3
    miopenConvolutionFwdAlgoImplicitGEMM = 5


class miopenConvBwdWeightsAlgorithm_t(enum.IntEnum):
    miopenConvolutionBwdWeightsAlgoGEMM = 0
    miopenConvolutionBwdWeightsAlgoDirect = 1
    miopenConvolutionBwdWeightsAlgoWinograd = 3
    miopenConvolutionBwdWeightsAlgoImplicitGEMM = 5


class miopenConvBwdDataAlgorithm_t(enum.IntEnum):
    miopenConvolutionBwdDataAlgoGEMM = 0
    miopenConvolutionBwdDataAlgoDirect = 1
    miopenConvolutionBwdDataAlgoFFT = 2
    miopenConvolutionBwdDataAlgoWinograd = 3
    miopenTransposeBwdDataAlgoGEMM = 4   # deprecated: treated as the GEMM algorithm
    miopenConvolutionBwdDataAlgoImplicitGEMM = 5


class miopenConvAlgorithm_t(enum.IntEnum):
    miopenConvolutionAlgoGEMM = 0
    miopenConvolutionAlgoDirect = 1
    miopenConvolutionAlgoFFT = 2
    miopenConvolutionAlgoWinograd = 3
    miopenConvolutionAlgoImplicitGEMM = 5


# -- recurrent layers ----------------------------------------------------------------------------
class miopenRNNMode_t(enum.IntEnum):
    miopenRNNRELU = 0
    miopenRNNTANH = 1
    miopenLSTM = 2
    miopenGRU = 3


class miopenRNNInputMode_t(enum.IntEnum):
    miopenRNNlinear = 0
    miopenRNNskip = 1


class miopenRNNAlgo_t(enum.IntEnum):
    miopenRNNdefault = 0
    miopenRNNfundamental = 1


class miopenRNNDirectionMode_t(enum.IntEnum):
    miopenRNNunidirection = 0
    miopenRNNbidirection = 1


class miopenRNNBiasMode_t(enum.IntEnum):
    miopenRNNNoBias = 0
    miopenRNNwithBias = 1


class miopenRNNGEMMalgoMode_t(enum.IntEnum):
    miopenRNNAlgoGEMM = 0


class miopenRNNPaddingMode_t(enum.IntEnum):
    miopenRNNIONotPadded = 0
    miopenRNNIOWithPadding = 1


class miopenRNNFWDMode_t(enum.IntEnum):
    miopenRNNTraining = 0
    miopenRNNInference = 1


class miopenRNNBaseLayout_t(enum.IntEnum):
    miopenRNNDataUnknownLayout = 0
    miopenRNNDataSeqMajorNotPadded = 1
    miopenRNNDataSeqMajorPadded = 2
    miopenRNNDataBatchMajorPadded = 3


ENUMS = (miopenStatus_t, miopenDataType_t, miopenConvolutionMode_t, miopenConvFwdAlgorithm_t,
         miopenConvBwdWeightsAlgorithm_t, miopenConvBwdDataAlgorithm_t, miopenConvAlgorithm_t,
         miopenRNNMode_t, miopenRNNInputMode_t, miopenRNNAlgo_t, miopenRNNDirectionMode_t,
         miopenRNNBiasMode_t, miopenRNNGEMMalgoMode_t, miopenRNNPaddingMode_t,
         miopenRNNFWDMode_t, miopenRNNBaseLayout_t)

__all__ = [e.__name__ for e in ENUMS]
for _e in ENUMS:
    for _m in _e:
        globals()[_m.name] = _m
        __all__.append(_m.name)
del _e, _m
