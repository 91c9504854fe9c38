"""What every stage shares, below them all (it imports nothing of the package): the feature dtypes the
kernels take and their names, the dtype each computes in, and how an op's specialisation is named.

The package's modules import only downwards: base, errors, config <- ir <- frontend, passes <- codegen
<- runtime, graph <- compiler <- nn, dgl (tests/test_layering.py holds them to it)."""
from __future__ import annotations

from typing import Iterable

import torch

__version__ = "0.1.0"

# the feature dtypes the kernels take, as variant keys and generated code name them
DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
               torch.bfloat16: "bfloat16"}
DTYPES = tuple(DTYPE_NAMES)
# what the kernels compute and take parameters in: float32 for the half types
COMPUTE_DTYPE = {torch.float32: torch.float32, torch.float64: torch.float64,
                 torch.float16: torch.float32, torch.bfloat16: torch.float32}
# The switch of a family whose variants with it on also compute, in the forward, what the backward would
# sweep the edges for: the op's autograd kernel turns it on where it records a backward (seastar_ops.h).
FOR_BACKWARD = "for_backward"


def variant_key(dtype: torch.dtype, options: Iterable[str]) -> str:
    """Names a specialisation of a family: the features' dtype and the options it was given (optional
    features, switches on), in schema order, as "float32|a_dst|mask|with_attention". The C++ entry
    point computes the same string (csrc/seastar_ops.h: Call::select_variant) to find its kernel."""
    return "".join([DTYPE_NAMES[dtype], *(f"|{option}" for option in options)])
