"""Fused layers: `seastar_layers.nn.pyg` (PyG drop-ins) and `seastar_layers.dgl` (DGL drop-ins)."""
