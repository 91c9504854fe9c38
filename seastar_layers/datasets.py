"""Datasets for the examples and benchmarks, offline.

Cora and CiteSeer load with PyG's own Planetoid loader from raw files laid out as PyG expects
(ROOT/<Name>/raw/ind.<name>.*). PubMed's feature file is often absent where downloads are
impossible: then its real graph and labels are used with generated features, and the dataset
says so (`features_generated`).
"""
from __future__ import annotations

import os
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

PLANETOID = ("Cora", "CiteSeer", "PubMed")
RAW_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
DEFAULT_RAW_DIRS = (Path(__file__).resolve().parents[1].parent / "shared" / "data" / "planetoid",)


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
    note: str = ""  # what is generated, if anything

    @property
    def num_nodes(self) -> int:
        return self.x.shape[0]


class DataUnavailable(FileNotFoundError):
    pass


def _raw_files(name: str, raw: Path) -> list[Path]:
    return [raw / f"ind.{name.lower()}.{s}" for s in RAW_SUFFIXES]


def prepare_root(root: str | os.PathLike, name: str) -> Path:
    """Make ROOT/<name>/raw hold the raw files, copying them from a known local copy if needed."""
    raw = Path(root) / name / "raw"
    if all(p.exists() for p in _raw_files(name, raw)):
        return raw
    for source in [Path(p) for p in os.environ.get("SEASTAR_PLANETOID_RAW", "").split(os.pathsep) if p] + list(
            DEFAULT_RAW_DIRS):
        found = [p for p in _raw_files(name, source) if p.exists()]
        if found:
            raw.mkdir(parents=True, exist_ok=True)
            for p in found:
                if not (raw / p.name).exists():
                    shutil.copy(p, raw / p.name)
            break
    return raw


def load_planetoid(root: str | os.PathLike, name: str) -> Dataset:
    """Cora, CiteSeer or PubMed, through torch_geometric.datasets.Planetoid where the files allow."""
    if name not in PLANETOID:
        raise ValueError(f"unknown dataset {name!r}; expected one of {', '.join(PLANETOID)}")
    raw = prepare_root(root, name)
    missing = [p.name for p in _raw_files(name, raw) if not p.exists()]
    if name == "PubMed" and missing and set(missing) <= {"ind.pubmed.allx", "ind.pubmed.x", "ind.pubmed.tx"}:
        return _pubmed_generated_features(raw)
    if missing:
        raise DataUnavailable(
            f"{name} is not available offline: {', '.join(missing)} missing under {raw}. Download the Planetoid raw "
            f"files (ind.{name.lower()}.*) from the planetoid repository into {raw}, or set SEASTAR_PLANETOID_RAW to "
            "a folder holding them.")
    from torch_geometric.datasets import Planetoid

    data = Planetoid(str(root), name)[0]
    return Dataset(name, data.x, data.y, data.edge_index, data.train_mask, data.val_mask, data.test_mask,
                   int(data.y.max()) + 1)


def _read(path: Path):
    with open(path, "rb") as f:
        return pickle.load(f, encoding="latin1")


def _pubmed_generated_features(raw: Path) -> Dataset:
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
                   note="real graph and labels; features GENERATED (ind.pubmed.allx is not available here)")


# Real graphs that cannot be downloaded here: their sizes, to generate stand-ins of the same scale.
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
