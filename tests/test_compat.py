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


def test_graphs_save_and_load_after_the_workaround(tmp_path):
    """The workaround re-imports DGL; its FFI objects must still serialise (DGL's datasets cache graphs so)."""
    import torch

    dgl = compat.import_dgl()
    g = dgl.graph((torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])))
    g.ndata["x"] = torch.randn(3, 4)
    dgl.save_graphs(str(tmp_path / "g.bin"), [g], {"labels": torch.arange(3)})
    (loaded,), extra = dgl.load_graphs(str(tmp_path / "g.bin"))
    assert torch.equal(torch.stack(loaded.edges()), torch.stack(g.edges()))
    assert torch.equal(loaded.ndata["x"], g.ndata["x"]) and torch.equal(extra["labels"], torch.arange(3))
