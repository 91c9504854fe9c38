"""seastar_layers: fused, memory-lean GNN layers for PyG and DGL, and the vertex-centric compiler
they are built with.

    from seastar_layers import GATConv, GCNConv, APPNP, SAGEConv, GINConv     # drop-ins for torch_geometric.nn
    from seastar_layers.dgl import GATConv, GraphConv, APPNPConv, SAGEConv, GINConv   # drop-ins for dgl.nn
    import seastar_layers as sl; sl.compile(vertex_function)     # custom layers
"""
from .base import __version__  # noqa: F401
from .compiler import compile  # noqa: E402
from .errors import CompileError, UnstabilisedSoftmaxWarning  # noqa: E402
from .graph import Graph  # noqa: E402
from .nn import programs as _programs  # noqa: E402,F401 - loads the extension: torch.ops.seastar_layers.*

_PYG_LAYERS = ("GATConv", "GCNConv", "APPNP", "SAGEConv", "GINConv")


def __getattr__(name):
    # the PyG layers import torch_geometric, which the compiler alone does not need
    if name in _PYG_LAYERS:
        from .nn import pyg

        return getattr(pyg, name)
    raise AttributeError(f"module 'seastar_layers' has no attribute {name!r}")


__all__ = ["CompileError", "Graph", "UnstabilisedSoftmaxWarning", "compile", "__version__", *_PYG_LAYERS]
