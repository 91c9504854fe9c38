"""compat.import_dgl: the plain import when it works, the graphbolt workaround only when it fails there."""
import sys
import types

import pytest

from seastar_layers import compat


@pytest.fixture
def isolated_modules(monkeypatch):
    saved = {k: v for k, v in sys.modules.items() if k == "dgl" or k.startswith("dgl.")}
    yield monkeypatch
    for k in [k for k in sys.modules if k == "dgl" or k.startswith("dgl.")]:
        del sys.modules[k]
    sys.modules.update(saved)


def test_plain_import_is_used_when_it_works(isolated_modules):
    fake = types.ModuleType("dgl")
    fake.DGLGraph = object
    calls = []

    def import_module(name):
        calls.append(name)
        return fake

    for k in [k for k in sys.modules if k == "dgl" or k.startswith("dgl.")]:
        del sys.modules[k]
    isolated_modules.setattr(compat.importlib, "import_module", import_module)
    assert compat.import_dgl() is fake
    assert calls == ["dgl"] and "dgl.graphbolt" not in sys.modules


def test_workaround_only_for_graphbolt_failures(isolated_modules):
    attempts = []

    def import_module(name):
        attempts.append("dgl.graphbolt" in sys.modules)
        if "dgl.graphbolt" not in sys.modules:
            raise FileNotFoundError("Cannot find DGL C++ graphbolt library at libgraphbolt_pytorch_9.9.so")
        module = types.ModuleType("dgl")
        module.DGLGraph = object
        return module

    for k in [k for k in sys.modules if k == "dgl" or k.startswith("dgl.")]:
        del sys.modules[k]
    isolated_modules.setattr(compat.importlib, "import_module", import_module)
    with pytest.warns(RuntimeWarning, match="graphbolt is unavailable"):
        compat.import_dgl()
    assert attempts == [False, True]


def test_unrelated_import_errors_propagate(isolated_modules):
    def import_module(name):
        raise ImportError("libcudart.so.12: cannot open shared object file")

    for k in [k for k in sys.modules if k == "dgl" or k.startswith("dgl.")]:
        del sys.modules[k]
    isolated_modules.setattr(compat.importlib, "import_module", import_module)
    with pytest.raises(ImportError, match="libcudart"):
        compat.import_dgl()


def test_real_dgl_imports():
    dgl = compat.import_dgl()
    g = dgl.graph(([0, 1], [1, 2]))
    assert g.num_edges() == 2
