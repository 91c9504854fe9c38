"""Evaluating hoisted parameter-only expressions with torch, so torch's autograd differentiates them."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..ir import Op, Program


def _as_tensor(x, like: torch.Tensor):
    return x if isinstance(x, torch.Tensor) else torch.as_tensor(x, dtype=like.dtype)


def _cmp(fn):
    return lambda a, b: fn(a, b).to(a.dtype if isinstance(a, torch.Tensor) else b.dtype)


TORCH_EVAL = {
    Op.NEG: torch.neg,
    Op.RECIP: torch.reciprocal,
    Op.EXP: torch.exp,
    Op.LOG: torch.log,
    Op.SQRT: torch.sqrt,
    Op.ABS: torch.abs,
    Op.SIGMOID: torch.sigmoid,
    Op.TANH: torch.tanh,
    Op.RELU: torch.relu,
    Op.LEAKY_RELU: lambda x, slope: F.leaky_relu(x, slope),
    Op.ELU: lambda x, alpha: F.elu(x, alpha),
    Op.ADD: torch.add,
    Op.SUB: torch.sub,
    Op.MUL: torch.mul,
    Op.DIV: torch.div,
    Op.POW: torch.pow,
    Op.MAXIMUM: torch.maximum,
    Op.MINIMUM: torch.minimum,
    Op.LT: _cmp(torch.lt),
    Op.LE: _cmp(torch.le),
    Op.GT: _cmp(torch.gt),
    Op.GE: _cmp(torch.ge),
    Op.EQ: _cmp(torch.eq),
    Op.NE: _cmp(torch.ne),
    Op.WHERE: lambda c, a, b: torch.where(c != 0, a, b),
    Op.REDUCE_SUM: lambda x, axes, keepdim: x.sum(dim=axes, keepdim=keepdim),
    Op.RESHAPE: lambda x, shape: x.reshape(shape),
    Op.BROADCAST: lambda x, shape: torch.broadcast_to(x, shape),
}
_NEED_TENSORS = {Op.MAXIMUM, Op.MINIMUM, Op.WHERE, Op.POW}


def evaluate_prelude(prelude: Program, params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    values: dict[int, object] = {}
    for i, n in enumerate(prelude.nodes):
        if n.op is Op.INPUT:
            values[i] = params.get(n.attr("name"))
        elif n.op is Op.CONST:
            values[i] = n.attr("value")
        else:
            args = [values[a] for a in n.args]
            if n.op in _NEED_TENSORS:
                like = next(a for a in args if isinstance(a, torch.Tensor))
                args = [_as_tensor(a, like) for a in args]
            values[i] = TORCH_EVAL[n.op](*args, **dict(n.attrs))
    return {name: values[i].contiguous() for name, i in prelude.outputs}
