"""Evaluating hoisted parameter-only expressions with torch, so torch's autograd differentiates them."""
from __future__ import annotations

import torch

from ..ir import OPS, Op, Program


def evaluate_prelude(prelude: Program, params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    values: dict[int, object] = {}
    for i, n in enumerate(prelude.nodes):
        if n.op is Op.INPUT:
            values[i] = params.get(n.attr("key").name)
        elif n.op is Op.CONST:
            values[i] = n.attr("value")
        else:
            args = [values[a] for a in n.args]
            like = next(a for a in args if isinstance(a, torch.Tensor))  # the prelude computes on params
            args = [a if isinstance(a, torch.Tensor) else like.new_tensor(a) for a in args]
            values[i] = OPS[n.op].torch(*args, **dict(n.attrs))
    return {key.name: values[i].contiguous() for key, i in prelude.outputs}
