"""What the layers read of the torch modules they hold (projections), without calling them."""
from __future__ import annotations

from typing import Optional

from torch import Tensor
from torch.nn.modules import module as _modules


def linear_weight(lin, kind: type) -> Optional[Tensor]:
    """lin's weight where calling lin would compute F.linear(x, weight) and nothing more, so that a
    layer's op may project with it instead (calling a module from Python costs a few times a small
    graph's product): an instance of exactly `kind` (the library's own Linear; a subclass may
    project otherwise) without bias, with no hooks of its own and no global module hooks (PyG's lazy
    initialisation is a forward pre-hook). Else None: the layer calls lin."""
    if type(lin) is not kind:
        return None
    parameters = lin._parameters
    if parameters["bias"] is not None or lin._forward_pre_hooks or lin._forward_hooks or lin._backward_hooks or \
            lin._backward_pre_hooks or _modules._global_forward_pre_hooks or _modules._global_forward_hooks or \
            _modules._global_backward_hooks or _modules._global_backward_pre_hooks:
        return None
    return parameters["weight"]
