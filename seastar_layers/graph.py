"""Graph: CSR by destination (in-edges, forward sweeps) and by source (out-edges, backward sweeps)."""
from __future__ import annotations

import torch


class Graph:
    """A directed graph from `num_src` source vertices to `num_dst` destination vertices.

    Edge k goes from ``edge_index[0, k]`` to ``edge_index[1, k]``; edge features are indexed by k.
    Both CSR layouts are built once, with a stable sort, so every kernel visits a row's edges in
    edge_index order and results are deterministic. ``num_src != num_dst`` is a bipartite graph
    (a sampled block).

    Shapes:
        edge_index: (2, E), int32 or int64
    """

    def __init__(self, in_indptr, in_src, in_eid, out_indptr, out_dst, out_eid, num_src: int, num_dst: int):
        self.in_indptr, self.in_src, self.in_eid = in_indptr, in_src, in_eid
        self.out_indptr, self.out_dst, self.out_eid = out_indptr, out_dst, out_eid
        self.num_src, self.num_dst = num_src, num_dst
        self._degree_cache: dict[torch.dtype, torch.Tensor] = {}

    @property
    def num_edges(self) -> int:
        return self.in_src.numel()

    @property
    def is_bipartite(self) -> bool:
        return self.num_src != self.num_dst

    @property
    def device(self) -> torch.device:
        return self.in_indptr.device

    def tensors(self) -> list[torch.Tensor]:
        return [self.in_indptr, self.in_src, self.in_eid, self.out_indptr, self.out_dst, self.out_eid]

    def in_degree(self, dtype: torch.dtype) -> torch.Tensor:
        """In-degree of every destination as a (num_dst,) tensor of dtype, cached."""
        if dtype not in self._degree_cache:
            self._degree_cache[dtype] = (self.in_indptr[1:] - self.in_indptr[:-1]).to(dtype)
        return self._degree_cache[dtype]

    def __repr__(self) -> str:
        return f"Graph(num_src={self.num_src}, num_dst={self.num_dst}, num_edges={self.num_edges})"

    @classmethod
    def from_edge_index(cls, edge_index: torch.Tensor, size=None) -> "Graph":
        """Build from a (2, E) integer tensor; size is N, (num_src, num_dst) or None (max index + 1)."""
        if not isinstance(edge_index, torch.Tensor):
            raise TypeError(f"'edge_index' must be a torch.Tensor of shape (2, E), got {type(edge_index).__name__}")
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError(f"'edge_index' must have shape (2, E), got {tuple(edge_index.shape)}")
        if edge_index.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"'edge_index' must hold int32 or int64 indices, got {edge_index.dtype}")
        edge_index = edge_index.to(torch.int64)
        src, dst = edge_index[0].contiguous(), edge_index[1].contiguous()
        if edge_index.numel() and int(edge_index.min()) < 0:
            raise ValueError("Found negative indices in 'edge_index'; vertex indices start at 0")
        num_src, num_dst = _sizes(edge_index, size)
        for name, idx, n in (("source (row 0)", src, num_src), ("destination (row 1)", dst, num_dst)):
            if idx.numel() and int(idx.max()) >= n:
                raise ValueError(f"Found {name} indices in 'edge_index' that are larger than {n - 1} (got "
                                 f"{int(idx.max())}); pass size=(num_src, num_dst) that covers every vertex")
        in_indptr, in_eid = _csr(dst, num_dst)
        out_indptr, out_eid = _csr(src, num_src)
        return cls(in_indptr, src[in_eid].contiguous(), in_eid, out_indptr, dst[out_eid].contiguous(), out_eid,
                   num_src, num_dst)


def _sizes(edge_index: torch.Tensor, size) -> tuple[int, int]:
    if size is None:
        n = int(edge_index.max()) + 1 if edge_index.numel() else 0
        return n, n
    if isinstance(size, int):
        return size, size
    if isinstance(size, (tuple, list)) and len(size) == 2 and all(isinstance(s, int) and s >= 0 for s in size):
        return int(size[0]), int(size[1])
    raise ValueError(f"'size' must be None, an int or a pair (num_src, num_dst) of ints, got {size!r}")


def _csr(keys: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """indptr over n rows and the stable permutation that sorts the edges by key."""
    perm = torch.sort(keys, stable=True).indices
    counts = torch.bincount(keys, minlength=n)
    indptr = torch.zeros(n + 1, dtype=torch.int64, device=keys.device)
    torch.cumsum(counts, 0, out=indptr[1:])
    return indptr, perm
