"""Which operators the FLOP formulas read the shapes of: the Kineto reader decodes those ops' args
only (on every other op they feed no figure), analyses/profiles computes their FLOPs. A leaf module,
so that the reader does not import an analysis."""

from __future__ import annotations

import re

import numpy as np

# each GEMM's (a, b) operands in its Input Dims
GEMM_OPERANDS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::bmm": (0, 1), "aten::baddbmm": (1, 2)}
CONV = re.compile(r"^aten::(_?convolution|conv[123]d|cudnn_convolution|mkldnn_convolution|_convolution)$")
SHAPE_GEMMS = frozenset((*GEMM_OPERANDS, "aten::linear"))  # the GEMMs whose FLOPs come from their Input Dims


def shape_args_needed(names) -> tuple[np.ndarray, np.ndarray]:
    """Per name: whether its FLOPs formula (analyses/profiles.shape_flops) reads Input Dims, and
    whether it reads Concrete Inputs too (convolutions)."""
    texts = [str(name) for name in names]
    conv = np.fromiter((CONV.match(text) is not None for text in texts), bool, len(texts))
    gemm = np.fromiter((text in SHAPE_GEMMS for text in texts), bool, len(texts))
    return gemm | conv, conv
