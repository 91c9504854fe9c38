"""What the layers read of the torch modules they hold (projections) and of their inputs, without calling them."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch.nn import Dropout
from torch.nn.modules import module as _modules


def linear_weight(lin, kind: type) -> Optional[Tensor]:
    """lin's weight where calling lin would compute F.linear(x, weight) and nothing more, so that a
    layer's op may project with it instead (calling a module from Python costs a few times a small
    graph's product): an instance of exactly `kind` (the library's own Linear; a subclass may
    project otherwise) without bias, with no hooks of its own and no global module hooks (PyG's lazy
    initialisation is a forward pre-hook). Else None: the layer calls lin."""
    parameters = linear_parameters(lin, kind)
    return parameters[0] if parameters is not None and parameters[1] is None else None


def linear_parameters(lin, kind: type) -> Optional[tuple[Tensor, Optional[Tensor]]]:
    """(weight, bias) where calling lin would compute F.linear(x, weight, bias) and nothing more (as
    linear_weight, a bias allowed), else None."""
    if type(lin) is not kind or _hooked(lin):
        return None
    parameters = lin._parameters
    return parameters["weight"], parameters["bias"]


def leading_linear(module, kinds: tuple) -> Optional[tuple[Tensor, Optional[Tensor], list]]:
    """(weight, bias, rest) where calling `module` computes F.linear(x, weight, bias) and then calls
    each of `rest` in turn: a linear layer of exactly one of `kinds` (as linear_parameters), or a
    torch Sequential without hooks whose first module is one. Else None. A layer that sums before
    its MLP may then project first (a sum of products is the product of the sum)."""
    first, rest = module, []
    if type(module) is torch.nn.Sequential and len(module) > 0 and not _hooked(module):
        first, rest = module[0], list(module)[1:]
    for kind in kinds:
        parameters = linear_parameters(first, kind)
        if parameters is not None:
            return parameters[0], parameters[1], rest
    return None


def _hooked(module) -> bool:
    """Whether calling `module` would run hooks: its own or global module hooks."""
    return bool(module._forward_pre_hooks or module._forward_hooks or module._backward_hooks or
                module._backward_pre_hooks or _modules._global_forward_pre_hooks or _modules._global_forward_hooks or
                _modules._global_backward_hooks or _modules._global_backward_pre_hooks)


def member(module, name: str):
    """module.<name> for a parameter, buffer or submodule, read from the module's own tables: a
    layer reads several on every call, and Module.__getattr__ costs about a microsecond a name."""
    for table in (module._parameters, module._buffers, module._modules):
        if name in table:
            return table[name]
    return getattr(module, name)  # a plain attribute, or Module's own AttributeError


def passes_through(dropout) -> bool:
    """Whether calling `dropout` would return its input as is: exactly torch's Dropout, in eval mode
    or with p = 0, with no hooks of its own and no global module hooks (as linear_weight checks), so
    that a layer may skip the call (a module call costs a few microseconds, a small graph's kernel)."""
    return type(dropout) is Dropout and (not dropout.training or dropout.p == 0) and not _hooked(dropout)


def leading_rows(part: Tensor, whole: Tensor, rows: int) -> bool:
    """Whether `part` is `whole`'s first `rows` rows as whole[:rows] makes them (a sampled block's
    destinations, the way PyG's and DGL's examples pass them): the same memory with the same strides, and where
    either wants gradients, a view of the same tensor with no hooks or retained gradient of its own,
    so that every gradient reaching part's rows through whole reaches the same tensor. A layer then
    projects those rows once, as part of whole, instead of a second time. Inside a traced model
    (torch.compile, torch.export) tensors have no memory to compare: False."""
    if torch.compiler.is_compiling():
        return False
    if (part.data_ptr() != whole.data_ptr() or part.shape[0] != rows or rows > whole.shape[0]
            or part.shape[1:] != whole.shape[1:] or part.stride() != whole.stride() or part.dtype != whole.dtype
            or part.device != whole.device):
        return False
    if not (part.requires_grad or whole.requires_grad):
        return True
    base = whole if whole._base is None else whole._base
    return part.requires_grad and whole.requires_grad and part._base is base and not part.retains_grad \
        and not part._backward_hooks
