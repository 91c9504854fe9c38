"""seastar_layers: fused, memory-lean GNN layers for PyG and DGL, and the vertex-centric compiler
they are built with."""
__version__ = "0.1.0"

from .errors import CompileError  # noqa: E402
from .graph import Graph  # noqa: E402
from .compiler import compile  # noqa: E402

__all__ = ["CompileError", "Graph", "compile", "__version__"]
