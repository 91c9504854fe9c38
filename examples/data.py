"""Datasets for the examples and benchmarks, through PyG's and DGL's own loaders: local files first,
else the loader's normal download.

* Cora, CiteSeer, PubMed: PyG's `Planetoid` on ROOT/<Name>/raw/ind.<name>.*. Missing raw files are
  copied from a local copy when one is found (`$SEASTAR_PLANETOID_RAW`, or a `shared/data/planetoid`
  folder beside the checkout or beside a folder above it); what is still missing, PyG downloads.
  PubMed without its feature files and without a network keeps its real graph, labels and split
  with GENERATED features, and says so.
* Reddit: PyG's `Reddit` on ROOT/Reddit/raw/reddit_{data,graph}.npz (the files of DGL's reddit.zip),
  or DGL's `RedditDataset`, which reads the same two files; either downloads them when absent.
* ogbn-products: the `ogb` package's loaders on ROOT (optional: `pip install ogb`).
* Reddit-generated: a GENERATED graph of Reddit's size and degree skew, for machines that cannot
  download Reddit; its name and every note say that it is generated.

The package itself knows nothing of these files: this module lives with the examples.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

CHECKOUT = Path(__file__).resolve().parents[1]
DEFAULT_ROOT = CHECKOUT / "data"
PLANETOID = ("Cora", "CiteSeer", "PubMed")
REAL_LARGE = ("Reddit", "ogbn-products")
GENERATED = ("Reddit-generated",)
DATASETS = PLANETOID + REAL_LARGE + GENERATED
RAW_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
REDDIT_FILES = ("reddit_data.npz", "reddit_graph.npz")


@dataclass
class Dataset:
    name: str
    x: torch.Tensor
    y: torch.Tensor
    edge_index: torch.Tensor
    train_mask: torch.Tensor
    val_mask: torch.Tensor
    test_mask: torch.Tensor
    num_classes: int
    note: str = ""  # what is generated, if anything; printed by every script that uses it

    @property
    def num_nodes(self) -> int:
        return self.x.shape[0]


class DataUnavailable(FileNotFoundError):
    pass


def load_dataset(name: str, root: str | os.PathLike = DEFAULT_ROOT, library: str = "pyg", scale: float = 1.0,
                 seed: int = 0) -> Dataset:
    """Any of DATASETS; `library` ("pyg" or "dgl") picks whose loader reads the large real graphs."""
    if library not in ("pyg", "dgl"):
        raise ValueError(f"library must be 'pyg' or 'dgl', got {library!r}")
    if name in PLANETOID:
        return load_planetoid(root, name, local_planetoid_copies())
    if name == "Reddit":
        return load_reddit(root, library)
    if name == "ogbn-products":
        return load_ogbn_products(root, library)
    if name in GENERATED:
        return generated_graph(name.removesuffix("-generated"), scale, seed)
    raise ValueError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")


def add_data_arguments(parser, default: str) -> None:
    parser.add_argument("--dataset", choices=DATASETS, default=default,
                        help="Reddit-generated is a GENERATED stand-in of Reddit's size, for machines without Reddit")
    parser.add_argument("--root", default=str(DEFAULT_ROOT),
                        help="where datasets live and downloads go: ROOT/<Name>/raw as PyG lays them out")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="size of a generated graph, as a fraction of the real one")


# --- Planetoid ------------------------------------------------------------------------------------

def local_planetoid_copies() -> list[Path]:
    """Folders that may hold Planetoid raw files: $SEASTAR_PLANETOID_RAW (os.pathsep-separated), then
    the shared/data/planetoid folder that this project's machines keep beside the checkout (or above)."""
    listed = [Path(p) for p in os.environ.get("SEASTAR_PLANETOID_RAW", "").split(os.pathsep) if p]
    beside = [folder / "shared" / "data" / "planetoid" for folder in CHECKOUT.parents]
    return listed + [p for p in beside if p.is_dir()]


def _raw_files(name: str, raw: Path) -> list[Path]:
    return [raw / f"ind.{name.lower()}.{s}" for s in RAW_SUFFIXES]


def copy_local_raw_files(raw: Path, name: str, local_copies: list[Path]) -> None:
    """Fill RAW with the files that the first local copy holding any of them has."""
    if all(p.exists() for p in _raw_files(name, raw)):
        return
    for source in local_copies:
        found = [p for p in _raw_files(name, source) if p.exists()]
        if found:
            raw.mkdir(parents=True, exist_ok=True)
            for p in found:
                if not (raw / p.name).exists():
                    shutil.copy(p, raw / p.name)
            return


def load_planetoid(root: str | os.PathLike, name: str, local_copies: list[Path]) -> Dataset:
    """Cora, CiteSeer or PubMed through torch_geometric.datasets.Planetoid: local files, else download."""
    if name not in PLANETOID:
        raise ValueError(f"unknown Planetoid dataset {name!r}; expected one of {', '.join(PLANETOID)}")
    from torch_geometric.datasets import Planetoid

    raw = Path(root) / name / "raw"
    copy_local_raw_files(raw, name, local_copies)
    missing = [p.name for p in _raw_files(name, raw) if not p.exists()]
    try:
        data = Planetoid(str(root), name)[0]  # downloads whatever is still missing
    except OSError as e:  # no network, or the server refused
        if not missing:  # not a download failure
            raise
        failure = f"{', '.join(missing)} missing under {raw}, and PyG's download failed ({type(e).__name__}: {e})"
        if name == "PubMed" and set(missing) <= {"ind.pubmed.allx", "ind.pubmed.x", "ind.pubmed.tx"}:
            return _pubmed_generated_features(raw, failure)
        looked = ", ".join(str(p) for p in local_copies) or "none found"
        raise DataUnavailable(
            f"{name} is not available offline: {failure}. Put the Planetoid raw files (ind.{name.lower()}.*) into "
            f"{raw}, or set SEASTAR_PLANETOID_RAW to a folder holding them (local copies looked in: {looked}), or "
            "run where PyG can download them.") from e
    return Dataset(name, data.x, data.y, data.edge_index, data.train_mask, data.val_mask, data.test_mask,
                   int(data.y.max()) + 1)


def _read(path: Path):
    with open(path, "rb") as f:
        return pickle.load(f, encoding="latin1")


def _pubmed_generated_features(raw: Path, why: str) -> Dataset:
    """PubMed's real graph, labels and split, with generated 500-wide features (as wide as the real ones)."""
    from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

    graph = _read(raw / "ind.pubmed.graph")
    ally, ty = torch.as_tensor(_read(raw / "ind.pubmed.ally")), torch.as_tensor(_read(raw / "ind.pubmed.ty"))
    test_index = torch.tensor([int(line) for line in (raw / "ind.pubmed.test.index").read_text().split()])
    n = max(max(graph), max(max(v, default=0) for v in graph.values())) + 1
    src = torch.tensor([u for u, vs in graph.items() for _ in vs])
    dst = torch.tensor([w for vs in graph.values() for w in vs])
    edge_index, _ = remove_self_loops(torch.stack([src, dst]))
    edge_index = coalesce(to_undirected(edge_index, num_nodes=n), num_nodes=n)
    y = torch.zeros(n, dtype=torch.long)
    y[: ally.shape[0]] = ally.argmax(1)
    y[torch.sort(test_index).values] = ty.argmax(1)
    gen = torch.Generator().manual_seed(0)
    centres = torch.randn(int(y.max()) + 1, 500, generator=gen)
    x = (centres[y] * 0.3 + torch.randn(n, 500, generator=gen)).relu()
    train = torch.zeros(n, dtype=torch.bool)
    for c in range(int(y.max()) + 1):
        train[(y[: ally.shape[0]] == c).nonzero()[:20, 0]] = True
    val = torch.zeros(n, dtype=torch.bool)
    val[ally.shape[0] - 500: ally.shape[0]] = True
    test = torch.zeros(n, dtype=torch.bool)
    test[test_index] = True
    return Dataset("PubMed", x, y, edge_index, train, val, test, int(y.max()) + 1,
                   note=f"real graph and labels; features GENERATED ({why})")


# --- Reddit and ogbn-products ---------------------------------------------------------------------

def _unavailable_large(name: str, loader: str, error: Exception, where: Path, files: str) -> DataUnavailable:
    return DataUnavailable(
        f"{name} could not be loaded by {loader}: {type(error).__name__}: {error}. Put {files} under {where}, or run "
        f"where {loader} can download them, or use --dataset Reddit-generated for a GENERATED stand-in of "
        "Reddit's size (its accuracy means nothing).")


def load_reddit(root: str | os.PathLike, library: str) -> Dataset:
    """Reddit (232,965 posts, 114.6M edges, 602 features, 41 classes) with PyG's `Reddit` or DGL's
    `RedditDataset`; both read reddit_data.npz and reddit_graph.npz, kept once in ROOT/Reddit/raw."""
    folder = Path(root) / "Reddit"
    raw = folder / "raw"
    files = f"{' and '.join(REDDIT_FILES)} (from reddit.zip)"
    if library == "pyg":
        from torch_geometric.datasets import Reddit

        try:
            data = Reddit(str(folder))[0]
        except OSError as e:
            raise _unavailable_large("Reddit", "PyG's Reddit", e, raw, files) from e
        return Dataset("Reddit", data.x, data.y, data.edge_index, data.train_mask, data.val_mask, data.test_mask, 41)

    from seastar_layers.compat import import_dgl

    dgl = import_dgl()
    dgl_root = folder / "dgl"
    # DGL reads RAW_DIR/reddit_<first 8 hex digits of the sha1 of its URL>/ (DGLDataset.raw_path);
    # point that at the files kept in PyG's layout, so one copy serves both libraries
    url = dgl.data.utils._get_dgl_url("dataset/reddit.zip")
    dgl_raw = dgl_root / f"reddit_{hashlib.sha1(url.encode()).hexdigest()[:8]}"
    if all((raw / f).exists() for f in REDDIT_FILES) and not dgl_raw.exists():
        dgl_root.mkdir(parents=True, exist_ok=True)
        dgl_raw.symlink_to(raw.resolve(), target_is_directory=True)
    try:
        g = dgl.data.RedditDataset(raw_dir=str(dgl_root))[0]
    except (OSError, RuntimeError) as e:  # DGL's download raises RuntimeError for an HTTP error
        raise _unavailable_large("Reddit", "DGL's RedditDataset", e, raw, files) from e
    return _from_dgl_graph("Reddit", g, 41)


def _from_dgl_graph(name: str, g, num_classes: int) -> Dataset:
    src, dst = g.edges()
    nd = g.ndata
    return Dataset(name, nd["feat"], nd["label"].flatten(), torch.stack([src, dst]), nd["train_mask"].bool(),
                   nd["val_mask"].bool(), nd["test_mask"].bool(), num_classes)


def load_ogbn_products(root: str | os.PathLike, library: str) -> Dataset:
    """ogbn-products (2.4M vertices, 123.7M directed edges) through ogb's loaders, which download it."""
    try:
        if library == "dgl":
            from seastar_layers.compat import import_dgl

            import_dgl()
            from ogb.nodeproppred import DglNodePropPredDataset as OgbDataset
        else:
            from ogb.nodeproppred import PygNodePropPredDataset as OgbDataset
    except ImportError as e:
        raise DataUnavailable(f"ogbn-products needs the optional package ogb, which is not installed ({e}): "
                              "pip install ogb") from e
    try:
        with _pyg_data_unpickling():
            dataset = OgbDataset(name="ogbn-products", root=str(root))
    except OSError as e:
        raise _unavailable_large("ogbn-products", "ogb", e, Path(root), "the extracted products.zip") from e
    except EOFError as e:  # ogb asks on standard input before downloading more than 1 GB
        raise DataUnavailable("ogb asks for a confirmation before it downloads ogbn-products (1.4 GB): run once where "
                              f"it can ask, or extract products.zip into {Path(root) / 'products'}") from e
    split = dataset.get_idx_split()
    if library == "dgl":
        g, y = dataset[0]
        x, edge_index = g.ndata["feat"], torch.stack(g.edges())
    else:
        data = dataset[0]
        x, y, edge_index = data.x, data.y, data.edge_index
    n = x.shape[0]
    masks = []
    for part in ("train", "valid", "test"):
        mask = torch.zeros(n, dtype=torch.bool)
        mask[split[part]] = True
        masks.append(mask)
    y = y.flatten().long()
    return Dataset("ogbn-products", x, y, edge_index, *masks, int(y.max()) + 1)


def _pyg_data_unpickling():
    """ogb 1.3.6 reads its processed PyG data with a plain torch.load, which torch 2.6+ limits to
    allowed classes: allow PyG's data classes for that call."""
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import GlobalStorage

    if not hasattr(torch.serialization, "safe_globals"):  # torch < 2.5 unpickles them anyway
        return contextlib.nullcontext()
    return torch.serialization.safe_globals([DataEdgeAttr, DataTensorAttr, GlobalStorage])


# --- generated stand-ins --------------------------------------------------------------------------

# Real graphs a machine may be unable to download: their sizes, to generate stand-ins of the same scale.
GENERATED_SPECS = {
    # Reddit (Hamilton et al. 2017, as in PyG/DGL): 232,965 posts, 114,615,892 directed edges
    # (undirected, both directions stored), 602 features, 41 classes; heavy-tailed degrees.
    "Reddit": dict(nodes=232_965, edges=114_615_892, features=602, classes=41, degree_sigma=1.0),
}


def generated_graph(name: str, scale: float = 1.0, seed: int = 0) -> Dataset:
    """A GENERATED graph with the size, feature width, class count and heavy-tailed degree skew of
    a real one (GENERATED_SPECS), `scale` times as many vertices and edges. Labels are random;
    features are class centroids plus noise, so models learn something, but accuracy on it says
    nothing about the real dataset: it is for speed and memory at scale."""
    if name not in GENERATED_SPECS:
        raise ValueError(f"no generator for {name!r}; known: {', '.join(GENERATED_SPECS)}")
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale}")
    spec = GENERATED_SPECS[name]
    n = max(int(spec["nodes"] * scale), 2)
    half = max(int(spec["edges"] * scale) // 2, 1)
    gen = torch.Generator().manual_seed(seed)
    # log-normal vertex weights give the skew; endpoints drawn in proportion to them
    weights = torch.exp(torch.randn(n, generator=gen) * spec["degree_sigma"])
    src = torch.multinomial(weights, half, replacement=True, generator=gen)
    dst = torch.multinomial(weights, half, replacement=True, generator=gen)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    edge_index = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])  # undirected, as Reddit
    y = torch.randint(0, spec["classes"], (n,), generator=gen)
    centres = torch.randn(spec["classes"], spec["features"], generator=gen)
    x = centres[y] * 0.5 + torch.randn(n, spec["features"], generator=gen)
    order = torch.randperm(n, generator=gen)
    masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
    bounds = [0, int(0.66 * n), int(0.76 * n), n]  # Reddit's split: 66% / 10% / 24%
    for mask, lo, hi in zip(masks, bounds[:-1], bounds[1:]):
        mask[order[lo:hi]] = True
    note = (f"GENERATED stand-in for {name} at scale {scale:g}: {n} vertices, {edge_index.shape[1]} edges, "
            f"{spec['features']} features, {spec['classes']} random classes (not the real dataset)")
    return Dataset(f"{name}-generated", x, y, edge_index, *masks, spec["classes"], note=note)
