"""seastar_layers: fused GNN layers for PyG and DGL, and the vertex-centric compiler behind them.

Install with `pip install --no-build-isolation .` so the build uses the torch already installed.
"""
import re
from pathlib import Path

from setuptools import find_packages, setup

version = re.search(r'__version__ = "([^"]+)"', Path("seastar_layers/__init__.py").read_text()).group(1)

setup(
    name="seastar_layers",
    version=version,
    description="Fused, memory-lean GNN layers for PyG and DGL, compiled from vertex-centric Python",
    long_description=Path("README.md").read_text(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["seastar_layers", "seastar_layers.*"]),
    python_requires=">=3.10",
    install_requires=["torch>=2.4", "tqdm"],
    extras_require={"pyg": ["torch_geometric>=2.5"], "dgl": ["dgl>=2.1", "packaging", "pandas"]},
)
