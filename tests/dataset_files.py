"""Small datasets written in the real file formats that PyG's and DGL's loaders read.

Features are class centroids plus noise, so a model learns something from them in a few steps.
"""
from __future__ import annotations

import gzip
import pickle
import zipfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import scipy.sparse as sp

PLANETOID_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


def _features_and_labels(rng, n: int, features: int, classes: int):
    labels = rng.integers(0, classes, n)
    centres = rng.normal(size=(classes, features))
    x = (centres[labels] + 0.5 * rng.normal(size=(n, features))).astype(np.float32)
    return x, labels


def _random_undirected_edges(rng, n: int, edges: int) -> tuple[np.ndarray, np.ndarray]:
    src, dst = rng.integers(0, n, edges), rng.integers(0, n, edges)
    keep = src != dst
    return np.concatenate([src[keep], dst[keep]]), np.concatenate([dst[keep], src[keep]])


def write_planetoid(folder: Path, name: str = "Cora", nodes: int = 600, features: int = 16, classes: int = 3,
                    train: int = 20, skip: tuple[str, ...] = (), seed: int = 0) -> dict:
    """ind.<name>.* files as the Planetoid repository has them: `allx`/`ally` for the first
    nodes - 40 vertices (the first `train` of them `x`/`y`, the training set; PyG takes the next 500
    for validation), `tx`/`ty` for the last 40 (listed in test.index), `graph` as a dict of neighbour
    lists. Features are scipy CSR matrices, labels one-hot arrays. Returns what was written."""
    rng = np.random.default_rng(seed)
    x, labels = _features_and_labels(rng, nodes, features, classes)
    one_hot = np.eye(classes, dtype=np.int64)[labels]
    n_all, n_train = nodes - 40, train
    test_index = np.arange(n_all, nodes)
    src, dst = _random_undirected_edges(rng, nodes, 4 * nodes)
    graph = defaultdict(list)
    for u, v in zip(src.tolist(), dst.tolist()):
        graph[u].append(v)
    objects = {"x": sp.csr_matrix(x[:n_train]), "y": one_hot[:n_train], "allx": sp.csr_matrix(x[:n_all]),
               "ally": one_hot[:n_all], "tx": sp.csr_matrix(x[n_all:]), "ty": one_hot[n_all:], "graph": graph}
    folder.mkdir(parents=True, exist_ok=True)
    for suffix in PLANETOID_SUFFIXES:
        if suffix in skip:
            continue
        path = folder / f"ind.{name.lower()}.{suffix}"
        if suffix == "test.index":
            path.write_text("".join(f"{i}\n" for i in test_index))
        else:
            with open(path, "wb") as f:
                pickle.dump(objects[suffix], f)
    return {"x": x, "labels": labels, "edges": set(zip(src.tolist(), dst.tolist())), "nodes": nodes}


def write_reddit(folder: Path, nodes: int = 300, features: int = 12, classes: int = 41, seed: int = 0) -> dict:
    """reddit_data.npz (feature, label, node_types: 1 train, 2 validation, 3 test) and
    reddit_graph.npz (a scipy COO adjacency), the two files of reddit.zip. Column 0 of the
    features is the vertex id, so a test can follow vertices through DGL's reordering."""
    rng = np.random.default_rng(seed)
    x, labels = _features_and_labels(rng, nodes, features, classes)
    x[:, 0] = np.arange(nodes)
    node_types = rng.choice([1, 2, 3], size=nodes, p=[0.66, 0.10, 0.24])
    src, dst = _random_undirected_edges(rng, nodes, 5 * nodes)
    adjacency = sp.coo_matrix((np.ones(len(src), dtype=np.float32), (src, dst)), shape=(nodes, nodes))
    adjacency.sum_duplicates()
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "reddit_data.npz", feature=x, label=labels, node_types=node_types)
    sp.save_npz(folder / "reddit_graph.npz", adjacency)
    return {"x": x, "labels": labels, "node_types": node_types,
            "edges": set(zip(adjacency.row.tolist(), adjacency.col.tolist())), "nodes": nodes}


def zip_reddit(folder: Path, zip_path: Path) -> Path:
    """reddit.zip as it is served: the two files at the top level."""
    with zipfile.ZipFile(zip_path, "w") as z:
        for name in ("reddit_data.npz", "reddit_graph.npz"):
            z.write(folder / name, name)
    return zip_path


def write_ogbn_products_zip(zip_path: Path, nodes: int = 120, features: int = 8, classes: int = 47,
                            seed: int = 0) -> dict:
    """products.zip as OGB serves it: products/raw/*.csv.gz (edges, counts, features, labels),
    products/split/sales_ranking/{train,valid,test}.csv.gz and the release marker."""
    rng = np.random.default_rng(seed)
    x, labels = _features_and_labels(rng, nodes, features, classes)
    src, dst = rng.integers(0, nodes, 3 * nodes), rng.integers(0, nodes, 3 * nodes)
    order = rng.permutation(nodes)
    split = {"train": order[: nodes // 2], "valid": order[nodes // 2: 2 * nodes // 3], "test": order[2 * nodes // 3:]}

    def lines(rows) -> str:
        return "".join(",".join(str(v) for v in np.atleast_1d(row)) + "\n" for row in rows)

    files = {"raw/edge.csv.gz": lines(zip(src, dst)), "raw/num-node-list.csv.gz": f"{nodes}\n",
             "raw/num-edge-list.csv.gz": f"{len(src)}\n", "raw/node-feat.csv.gz": lines(x.tolist()),
             "raw/node-label.csv.gz": lines(labels), "RELEASE_v1.txt": ""}
    files.update({f"split/sales_ranking/{part}.csv.gz": lines(ids) for part, ids in split.items()})
    with zipfile.ZipFile(zip_path, "w") as z:
        for name, text in files.items():
            z.writestr(f"products/{name}", gzip.compress(text.encode()) if name.endswith(".gz") else text)
    # OGB stores each edge in both directions (add_inverse_edge)
    edges = set(zip(src.tolist(), dst.tolist())) | set(zip(dst.tolist(), src.tolist()))
    return {"x": x, "labels": labels, "split": split, "edges": edges, "nodes": nodes}
