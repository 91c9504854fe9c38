"""The examples' dataset loaders (examples/data.py) on small files in the real formats, read by PyG's
and DGL's own loaders: local files first, else the loader's download (here a stand-in that copies
from a local folder), else a clear error."""
import shutil
import sys
from pathlib import Path

import pytest
import torch
from dataset_files import PLANETOID_SUFFIXES, write_ogbn_products_zip, write_planetoid, write_reddit, zip_reddit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import data  # noqa: E402  (examples/data.py)


class Offline(OSError):
    """What PyG's fetch raises without a network (aiohttp's ClientConnectorError is an OSError)."""


@pytest.fixture
def planetoid_fetch(monkeypatch):
    """Replaces Planetoid's network fetch (torch_geometric.io.fs.cp of URL/<file> into the raw folder):
    set `server` to a folder to serve files from it, leave it None to be offline."""
    import torch_geometric.io.fs as fs

    class Fetch:
        server = None
        fetched = []

        def __call__(self, url, folder, *args, **kwargs):
            if not str(url).startswith("https://"):
                return original(url, folder, *args, **kwargs)
            if self.server is None:
                raise Offline("Cannot connect to host github.com:443 [Name or service not known]")
            name = str(url).rsplit("/", 1)[1]
            self.fetched.append(name)
            shutil.copy(self.server / name, Path(folder) / name)

    original = fs.cp
    fetch = Fetch()
    monkeypatch.setattr(fs, "cp", fetch)
    return fetch


def assert_planetoid_matches(dataset, written):
    assert dataset.num_nodes == written["nodes"] and not dataset.note
    torch.testing.assert_close(dataset.x, torch.as_tensor(written["x"]))
    assert torch.equal(dataset.y, torch.as_tensor(written["labels"]))
    assert set(map(tuple, dataset.edge_index.t().tolist())) == written["edges"]
    assert int(dataset.train_mask.sum()) == 20 and int(dataset.val_mask.sum()) == 500
    assert int(dataset.test_mask.sum()) == 40


def test_planetoid_from_a_local_copy_without_a_download(tmp_path, planetoid_fetch):
    written = write_planetoid(tmp_path / "copy")
    dataset = data.load_planetoid(tmp_path / "root", "Cora", [tmp_path / "elsewhere", tmp_path / "copy"])
    assert_planetoid_matches(dataset, written)
    assert planetoid_fetch.fetched == []
    assert sorted(p.name for p in (tmp_path / "root" / "Cora" / "raw").iterdir()) == sorted(
        f"ind.cora.{s}" for s in PLANETOID_SUFFIXES)


def test_planetoid_on_a_fresh_root_is_downloaded_by_pyg(tmp_path, planetoid_fetch):
    written = write_planetoid(tmp_path / "server")
    planetoid_fetch.server = tmp_path / "server"
    dataset = data.load_planetoid(tmp_path / "root", "Cora", [])
    assert sorted(planetoid_fetch.fetched) == sorted(f"ind.cora.{s}" for s in PLANETOID_SUFFIXES)
    assert_planetoid_matches(dataset, written)
    # a second load reads what is on disk and fetches nothing more
    planetoid_fetch.server, planetoid_fetch.fetched = None, []
    assert_planetoid_matches(data.load_planetoid(tmp_path / "root", "Cora", []), written)
    assert planetoid_fetch.fetched == []


def test_planetoid_offline_with_nothing_local_says_how_to_provide_it(tmp_path, planetoid_fetch):
    with pytest.raises(data.DataUnavailable) as info:
        data.load_planetoid(tmp_path / "root", "CiteSeer", [tmp_path / "empty"])
    message = str(info.value)
    assert "CiteSeer is not available offline" in message
    assert str(tmp_path / "root" / "CiteSeer" / "raw") in message
    assert "ind.citeseer.x" in message and "SEASTAR_PLANETOID_RAW" in message
    assert "Offline" in message and str(tmp_path / "empty") in message
    assert isinstance(info.value.__cause__, Offline)


def test_pubmed_without_its_features_offline_keeps_its_real_graph_and_says_features_are_generated(
        tmp_path, planetoid_fetch):
    written = write_planetoid(tmp_path / "copy", name="PubMed", skip=("x", "tx", "allx"))
    dataset = data.load_planetoid(tmp_path / "root", "PubMed", [tmp_path / "copy"])
    assert "features GENERATED" in dataset.note and "ind.pubmed.allx" in dataset.note
    assert dataset.num_nodes == written["nodes"] and dataset.x.shape[1] == 500
    assert torch.equal(dataset.y, torch.as_tensor(written["labels"]))
    assert set(map(tuple, dataset.edge_index.t().tolist())) == written["edges"]


def test_pubmed_without_its_features_is_downloaded_where_the_network_allows(tmp_path, planetoid_fetch):
    written = write_planetoid(tmp_path / "server", name="PubMed")
    write_planetoid(tmp_path / "copy", name="PubMed", skip=("x", "tx", "allx"))
    planetoid_fetch.server = tmp_path / "server"
    dataset = data.load_planetoid(tmp_path / "root", "PubMed", [tmp_path / "copy"])
    assert_planetoid_matches(dataset, written)


def test_local_copies_come_from_the_environment_then_a_shared_folder_above_the_checkout(tmp_path, monkeypatch):
    shared = tmp_path / "shared" / "data" / "planetoid"
    shared.mkdir(parents=True)
    monkeypatch.setattr(data, "CHECKOUT", tmp_path / "projects" / "checkout")
    monkeypatch.setenv("SEASTAR_PLANETOID_RAW", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    assert data.local_planetoid_copies() == [tmp_path / "a", tmp_path / "b", shared]
    monkeypatch.delenv("SEASTAR_PLANETOID_RAW")
    monkeypatch.setattr(data, "CHECKOUT", tmp_path / "elsewhere" / "checkout")
    (tmp_path / "shared").rename(tmp_path / "moved")
    assert data.local_planetoid_copies() == []


def assert_reddit_matches(dataset, written):
    """Vertices may be renumbered (DGL reorders them): column 0 of the features holds the original id."""
    ids = dataset.x[:, 0].round().long()
    assert sorted(ids.tolist()) == list(range(written["nodes"]))
    torch.testing.assert_close(dataset.x, torch.as_tensor(written["x"])[ids])
    assert torch.equal(dataset.y, torch.as_tensor(written["labels"])[ids])
    types = torch.as_tensor(written["node_types"])[ids]
    for mask, kind in ((dataset.train_mask, 1), (dataset.val_mask, 2), (dataset.test_mask, 3)):
        assert torch.equal(mask, types == kind)
    assert set(map(tuple, ids[dataset.edge_index].t().tolist())) == written["edges"]
    assert dataset.name == "Reddit" and dataset.num_classes == 41 and not dataset.note


@pytest.mark.parametrize("library", ["pyg", "dgl"])
def test_reddit_from_local_files_in_pyg_layout(tmp_path, library, monkeypatch):
    written = write_reddit(tmp_path / "root" / "Reddit" / "raw")
    refuse_downloads(monkeypatch)
    assert_reddit_matches(data.load_reddit(tmp_path / "root", library), written)


def refuse_downloads(monkeypatch):
    import torch_geometric.datasets.reddit as pyg_reddit

    from seastar_layers.compat import import_dgl

    import_dgl()
    import dgl.data.dgl_dataset as dgl_dataset

    def offline(*args, **kwargs):
        raise Offline("no network")

    monkeypatch.setattr(pyg_reddit, "download_url", offline)
    monkeypatch.setattr(dgl_dataset, "download", offline)


@pytest.mark.parametrize("library", ["pyg", "dgl"])
def test_reddit_on_a_fresh_root_is_downloaded_by_the_library(tmp_path, library, monkeypatch):
    written = write_reddit(tmp_path / "files")
    served = zip_reddit(tmp_path / "files", tmp_path / "reddit.zip")
    fetched = []
    if library == "pyg":
        import torch_geometric.datasets.reddit as pyg_reddit

        def fetch(url, folder, *args, **kwargs):  # torch_geometric.data.download_url
            fetched.append(url)
            return shutil.copy(served, Path(folder) / "reddit.zip")

        monkeypatch.setattr(pyg_reddit, "download_url", fetch)
    else:
        from seastar_layers.compat import import_dgl

        import_dgl()
        import dgl.data.dgl_dataset as dgl_dataset

        def fetch(url, path, *args, **kwargs):  # dgl.data.utils.download
            fetched.append(url)
            return shutil.copy(served, path)

        monkeypatch.setattr(dgl_dataset, "download", fetch)
    dataset = data.load_reddit(tmp_path / "root", library)
    assert len(fetched) == 1 and fetched[0].endswith("/reddit.zip")
    assert_reddit_matches(dataset, written)


@pytest.mark.parametrize("library", ["pyg", "dgl"])
def test_reddit_offline_says_how_to_provide_it_and_names_the_generated_stand_in(tmp_path, library, monkeypatch):
    refuse_downloads(monkeypatch)
    with pytest.raises(data.DataUnavailable) as info:
        data.load_reddit(tmp_path / "root", library)
    message = str(info.value)
    assert "reddit_data.npz and reddit_graph.npz" in message and str(tmp_path / "root" / "Reddit" / "raw") in message
    assert "--dataset Reddit-generated" in message and "no network" in message


def test_ogbn_products_without_ogb_names_the_package_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ogb", None)  # import ogb now raises ImportError, installed or not
    monkeypatch.setitem(sys.modules, "ogb.nodeproppred", None)
    for library in ("pyg", "dgl"):
        with pytest.raises(data.DataUnavailable, match=r"needs the optional package ogb.*pip install ogb"):
            data.load_dataset("ogbn-products", tmp_path, library)


@pytest.mark.parametrize("library", ["pyg", "dgl"])
def test_ogbn_products_on_a_fresh_root_is_downloaded_by_ogb(tmp_path, library, monkeypatch):
    pytest.importorskip("ogb", reason="ogb is optional and not installed here")
    if library == "dgl":
        from seastar_layers.compat import import_dgl

        import_dgl()
    import importlib

    ogb_module = importlib.import_module(f"ogb.nodeproppred.dataset_{library}")
    written = write_ogbn_products_zip(tmp_path / "products.zip")
    fetched = []

    def fetch(url, folder, log=True):  # ogb.utils.url.download_url
        fetched.append(url)
        Path(folder).mkdir(parents=True, exist_ok=True)
        return shutil.copy(tmp_path / "products.zip", folder)

    monkeypatch.setattr(ogb_module, "download_url", fetch)
    monkeypatch.setattr(ogb_module, "decide_download", lambda url: True)  # ogb asks before 1 GB downloads
    for _ in range(2):  # downloads and processes, then reads what it processed
        dataset = data.load_dataset("ogbn-products", tmp_path / "root", library)
    assert len(fetched) == 1 and fetched[0].endswith("/products.zip")
    assert dataset.name == "ogbn-products" and dataset.num_nodes == written["nodes"]
    torch.testing.assert_close(dataset.x, torch.as_tensor(written["x"]), atol=1e-6, rtol=1e-6)
    assert torch.equal(dataset.y, torch.as_tensor(written["labels"]))
    assert set(map(tuple, dataset.edge_index.t().tolist())) == written["edges"]
    for mask, part in zip((dataset.train_mask, dataset.val_mask, dataset.test_mask), ("train", "valid", "test")):
        assert sorted(mask.nonzero().flatten().tolist()) == sorted(written["split"][part].tolist())


def test_generated_graph_says_it_is_generated():
    dataset = data.load_dataset("Reddit-generated", scale=0.001)
    assert dataset.name == "Reddit-generated" and "GENERATED stand-in for Reddit" in dataset.note
    assert dataset.x.shape == (232, 602) and int(dataset.y.max()) < 41
    with pytest.raises(ValueError, match="scale must be positive"):
        data.load_dataset("Reddit-generated", scale=0)


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="unknown dataset 'Reddit2'; expected one of Cora, CiteSeer"):
        data.load_dataset("Reddit2")
    with pytest.raises(ValueError, match="library must be 'pyg' or 'dgl', got 'jax'"):
        data.load_dataset("Cora", library="jax")


def test_planetoid_failures_other_than_a_download_are_not_hidden(tmp_path, planetoid_fetch, monkeypatch):
    """With every raw file present, an OSError is not a download failure: PubMed must not fall back
    to generated features, and the error comes through as it is."""
    import torch_geometric.datasets.planetoid as planetoid

    write_planetoid(tmp_path / "root" / "PubMed" / "raw", name="PubMed")

    def broken(*args, **kwargs):
        raise PermissionError("processed folder not writable")

    monkeypatch.setattr(planetoid, "read_planetoid_data", broken)
    with pytest.raises(PermissionError, match="processed folder not writable"):
        data.load_planetoid(tmp_path / "root", "PubMed", [])
