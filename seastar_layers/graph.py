"""Graph: CSR by destination (in-edges, forward sweeps) and by source (out-edges, backward sweeps)."""
from __future__ import annotations

import functools
import operator
import sys
import threading
import weakref
from collections import OrderedDict
from typing import Optional

import torch
from torch import Tensor
from torch.utils.dlpack import from_dlpack



def with_self_loops(src: Tensor, dst: Tensor, num_loops: int) -> tuple[Tensor, Tensor, Tensor]:
    """PyG's remove_self_loops, then add_self_loops(num_nodes=num_loops), as (src, dst, listed) slots."""
    loops = torch.arange(num_loops, dtype=src.dtype, device=src.device)
    return torch.cat([src, loops]), torch.cat([dst, loops]), listed_with_self_loops(src, dst, num_loops)


def listed_with_self_loops(src: Tensor, dst: Tensor, num_loops: int) -> Tensor:
    """Which of with_self_loops' slots PyG keeps: every edge but a self-loop, then every appended loop."""
    return torch.cat([src != dst, torch.ones(num_loops, dtype=torch.bool, device=src.device)])


class Graph:
    """A directed graph from `num_src` source vertices to `num_dst` destination vertices.

    Edge k goes from ``edge_index[0, k]`` to ``edge_index[1, k]``; edge features are indexed by k.
    Both CSR layouts are built once, with a stable sort, so every kernel visits a row's edges in one
    order and results are deterministic: edge_index order, or on a graph of 2^20 edges or more
    (by_neighbour) by their other end, then edge_index order, so that a sweep can take its
    neighbours in chunks that fit the cache. ``num_src != num_dst`` is a bipartite graph (a sampled
    block).

    Built from both layouts directly, ``Graph(in_indptr, in_src, in_eid, out_indptr, out_dst,
    out_eid, num_src, num_dst)`` checks everything a kernel relies on (and converts int32 arrays),
    so a wrong array raises instead of crashing the process: in-edges of destination ``d`` are
    ``in_src[in_indptr[d]:in_indptr[d + 1]]`` with edge ids ``in_eid[...]``, out-edges of source
    ``s`` are ``out_dst[out_indptr[s]:out_indptr[s + 1]]`` with ids ``out_eid[...]``, and both
    layouts must list the same E edges, each id 0..E-1 once.

    The arrays hold int32 indices where the graph's sizes fit (index_dtype), int64 beyond; a graph
    whose arrays come from DGL or from a PyG EdgeIndex shares them in their own dtype.

    Shapes:
        edge_index: (2, E), int32 or int64
        in_indptr: (num_dst + 1,); out_indptr: (num_src + 1,); in_src, in_eid, out_dst, out_eid: (E,)
    """

    def __init__(self, in_indptr, in_src, in_eid, out_indptr, out_dst, out_eid, num_src: int, num_dst: int):
        num_src, num_dst = _vertex_count("num_src", num_src), _vertex_count("num_dst", num_dst)
        arrays = _index_arrays(dict(in_indptr=in_indptr, in_src=in_src, in_eid=in_eid, out_indptr=out_indptr,
                                    out_dst=out_dst, out_eid=out_eid))
        problem = _layouts_problem(*arrays, num_src, num_dst) or _same_edges_problem(*arrays)
        if problem:
            raise ValueError(f"sl.Graph: {problem}; build graphs from an edge_index with "
                             "sl.Graph.from_edge_index(edge_index, size) unless you hold both layouts")
        dtype = index_dtype(num_src, num_dst, arrays[1].numel())
        self._assign([t.to(dtype) for t in arrays], num_src, num_dst)

    @classmethod
    def _from_checked(cls, arrays, num_src: int, num_dst: int) -> "Graph":
        """For the constructors below, whose arrays (int32 or int64, one dtype) are right by construction or
        already checked."""
        graph = cls.__new__(cls)
        graph._assign(arrays, num_src, num_dst)
        return graph

    def _assign(self, arrays, num_src: int, num_dst: int, listed: torch.Tensor | None = None) -> None:
        self.in_indptr, self.in_src, self.in_eid, self.out_indptr, self.out_dst, self.out_eid = arrays
        self.num_src, self.num_dst = num_src, num_dst
        self._listed = listed
        self._orders: tuple[torch.Tensor, torch.Tensor] | None = None
        self._op_tensors: list[torch.Tensor] | None = None
        self._derived: dict = {}

    @property
    def listed(self) -> torch.Tensor | None:
        """Which edge slots belong to rows, where some do not (see csr_layouts), as a (E,) bool tensor; None
        where every slot does. Where the extension left them out (from_edges with loops), it follows from the
        rows: the slots after the last row's edges; made on first use (dropout and explain masks read it)."""
        if self._listed is _UNLISTED_AFTER_ROWS:
            listed = torch.ones(self.num_edges, dtype=torch.bool, device=self.device)
            listed[self.in_eid[int(self.in_indptr[-1]):].long()] = False
            self._listed = listed
        return self._listed

    @listed.setter
    def listed(self, listed: torch.Tensor | None) -> None:
        self._listed = listed

    @property
    def num_edges(self) -> int:
        """Edge slots: per-edge tensors have one row each (all are edges unless `listed` says otherwise)."""
        return self.in_src.numel()

    @property
    def is_bipartite(self) -> bool:
        return self.num_src != self.num_dst

    @property
    def device(self) -> torch.device:
        return self.in_indptr.device

    def tensors(self, with_orders: bool = False) -> list[torch.Tensor]:
        """The CSR arrays the kernels read; with_orders adds the destination and the source rows,
        heaviest first (GPU kernels take rows in that order, so hubs start early, not last)."""
        arrays = [self.in_indptr, self.in_src, self.in_eid, self.out_indptr, self.out_dst, self.out_eid]
        return arrays + list(self.row_orders()) if with_orders else arrays

    def op_tensors(self) -> list[torch.Tensor]:
        """The graph as torch.ops.seastar_layers.* take it on its device: tensors(), with the row
        orders on a GPU (made once: a layer passes it on every call)."""
        if self._op_tensors is None:
            self._op_tensors = self.tensors(with_orders=self.device.type == "cuda")
        return self._op_tensors

    def row_orders(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._orders is None:
            self._orders = (heaviest_first(self.in_indptr), heaviest_first(self.out_indptr))
        return self._orders

    def endpoints(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The source and the destination of every edge slot, by edge id, as int64 (torch's index ops take them)."""
        positions = torch.arange(self.num_edges, dtype=self.in_indptr.dtype, device=self.device)
        rows = torch.searchsorted(self.in_indptr, positions, right=True) - 1
        eids = self.in_eid.long()
        src = torch.empty_like(rows).scatter_(0, eids, self.in_src.long())
        return src, torch.empty_like(rows).scatter_(0, eids, rows)

    def derived(self, key, make):
        """make(), a value that follows from this graph alone (e.g. a layer's normalisation weights),
        made once per graph and key: the graph caches hold the graph as long as its source lives.
        Inside a traced model (torch.compile, export) on every call, as part of the traced graph."""
        if torch.compiler.is_compiling():
            return make()
        if key not in self._derived:
            self._derived[key] = make()
        return self._derived[key]

    def in_degree(self, dtype: torch.dtype) -> torch.Tensor:
        """In-degree of every destination as a (num_dst,) tensor of dtype, cached."""
        return self.derived(("in_degree", dtype), lambda: (self.in_indptr[1:] - self.in_indptr[:-1]).to(dtype))

    def __repr__(self) -> str:
        return f"Graph(num_src={self.num_src}, num_dst={self.num_dst}, num_edges={self.num_edges})"

    @classmethod
    def from_edge_index(cls, edge_index: torch.Tensor, size=None) -> "Graph":
        """Build from a (2, E) integer tensor; size is N, (num_src, num_dst) or None (max index + 1)."""
        if not isinstance(edge_index, torch.Tensor):
            raise TypeError(f"'edge_index' must be a torch.Tensor of shape (2, E), got {type(edge_index).__name__}")
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError(f"'edge_index' must have shape (2, E), got {tuple(edge_index.shape)}")
        check_index_dtype(edge_index, who="sl.Graph.from_edge_index: ")
        num_src, num_dst = _sizes(edge_index, size)
        return cls.from_edges(edge_index[0], edge_index[1], num_src, num_dst)

    @classmethod
    def from_edges(cls, src: torch.Tensor, dst: torch.Tensor, num_src: int, num_dst: int,
                   listed: torch.Tensor | None = None, loops: int = 0) -> "Graph":
        """From edges src[k] -> dst[k] (1-d integer tensors); where `listed` is given, only the edges
        it marks belong to rows (csr_layouts). With `loops`, PyG's self-loop handling: the edge
        slots are the edges, then a loop (i, i) for each i < loops, and the edges that are loops
        are not listed (with_self_loops). Inside a traced model (torch.compile,
        torch.export) the index checks are asserts the compiled graph runs."""
        if loops and listed is not None:
            raise ValueError("Graph.from_edges: pass 'listed' or 'loops', not both")
        if src.dtype != torch.int64 or dst.dtype != torch.int64:  # .to costs a microsecond even where it is a no-op
            src, dst = src.to(torch.int64), dst.to(torch.int64)
        dtype = index_dtype(num_src, num_dst, src.numel() + loops)
        if src.is_cpu and not torch.compiler.is_compiling() and _extension() is not None:
            # the extension's counting sort appends the loops by count (no copy of the edges), leaves
            # the edges that are loops out of the rows and checks every index as it goes; only a
            # refusal pays for the passes that name the bad index in the user's terms
            try:
                arrays = list(torch.ops.seastar_layers.csr_layouts.default(
                    src.contiguous(), dst.contiguous(), num_src, num_dst,
                    None if listed is None else listed.contiguous(), loops, dtype, loops > 0,
                    by_neighbour(src.numel() + loops)))
            except ValueError:
                _check_edge_range(src, dst, num_src, num_dst)
                raise
            if loops:
                listed = _UNLISTED_AFTER_ROWS
        else:
            if loops:
                src, dst, listed = with_self_loops(src, dst, loops)
            if torch.compiler.is_compiling():
                check_edges(src, dst, num_src, num_dst)
            else:
                _check_edge_range(src, dst, num_src, num_dst)
            arrays = [t.to(dtype) for t in csr_layouts(src, dst, num_src, num_dst, listed,
                                                       by_neighbour(src.numel()))]
        graph = cls._from_checked(arrays, num_src, num_dst)
        graph.listed = listed
        return graph

    @classmethod
    def from_sorted_edge_index(cls, edge_index, size) -> Graph:
        """From a sorted PyG EdgeIndex: both layouts come from (and stay in) its own CSR/CSC caches.

        Its claimed sort order is checked (one pass); its caches are trusted as PyG's own sparse ops
        trust them (checking them costs more than building from scratch), so an EdgeIndex edited in
        place after filling them describes its old edges, here as there: make a new EdgeIndex after
        editing one."""
        num_src, num_dst = size
        plain = edge_index.as_tensor()
        if plain.numel() and (int(plain[0].max()) >= num_src or int(plain[1].max()) >= num_dst
                              or int(plain.min()) < 0):
            raise ValueError(f"Found indices in 'edge_index' outside its sparse_size {tuple(size)}")
        order = edge_index.sort_order
        keys = plain[1] if order == "col" else plain[0]
        if bool((keys[1:] < keys[:-1]).any()):
            raise ValueError(f"'edge_index' is an EdgeIndex that claims to be sorted by {order} but is not; build it "
                             f"without sort_order, or sort it with edge_index.sort_by('{order}')")
        (colptr, row), col_perm = edge_index.get_csc()
        (rowptr, col), row_perm = edge_index.get_csr()
        arange = torch.arange(plain.shape[1], dtype=plain.dtype, device=plain.device)
        arrays = (colptr, row, col_perm if col_perm is not None else arange,
                  rowptr, col, row_perm if row_perm is not None else arange)
        return cls._from_checked(_shared_dtype(arrays, num_src, num_dst), num_src, num_dst)

    @classmethod
    def from_dgl(cls, g, sizes: tuple[int, int] | None = None) -> Graph:
        """From a DGLGraph or block, with DGL's edge ids as edge ids.

        A graph of at least SHARED_LAYOUT_EDGES edges where DGL already holds its CSC and CSR
        (g.create_formats_(), as DGL's examples call for a graph trained on many times) gets DGL's
        arrays as its layouts, shared, not copied, once checked safe to index (DGL 2.1 under a newer
        torch has returned corrupt adjacency arrays for a block built from edges outside its
        destinations). Every other graph, a sampler's block (which holds only its edge list) among
        them, is built from its edge list by from_edges: asking DGL to build both layouts would
        cost twice as much (5.2 ms against 2.5 ms on a 163k-edge block) and keep its copies, and on
        a small graph reading DGL's two layouts (its formats, two adjacency calls through DGL's FFI,
        the checks) costs 200 us against 45 us for its edge list. A graph restricted to sparse
        formats without an edge list (g.formats("csc")) lists its edges with their ids. `sizes` is
        dgl_sizes(g) where the caller has read it."""
        num_src, num_dst = dgl_sizes(g) if sizes is None else sizes
        num_edges = g._graph.num_edges(0)
        if num_edges >= SHARED_LAYOUT_EDGES and {"csc", "csr"} <= set(g.formats()["created"]):
            arrays = _shared_dtype((*g.adj_tensors("csc"), *g.adj_tensors("csr")), num_src, num_dst)
            if arrays[1].numel() == num_edges and not _layouts_problem(*arrays, num_src, num_dst):
                return cls._from_checked(arrays, num_src, num_dst)
        try:
            src, dst = _dgl_edges_by_id(g)
        except Exception as error:  # noqa: BLE001 - by name: where DGL was imported again without graphbolt
            # (compat.import_dgl), its C library still raises the first import's DGLError, not dgl.DGLError
            if type(error).__name__ != "DGLError":
                raise
            # no edge list, and none allowed: the sparse formats list edges by (src, dst)
            listed_src, listed_dst, eid = g.edges(order="srcdst", form="all")
            eid = eid.to(torch.int64)
            # an id DGL did not list leaves a -1 there, which from_edges refuses
            src = torch.full_like(eid, -1).index_copy_(0, eid, listed_src.to(torch.int64))
            dst = torch.full_like(eid, -1).index_copy_(0, eid, listed_dst.to(torch.int64))
        return cls.from_edges(src, dst, num_src, num_dst)


def dgl_sizes(g) -> tuple[int, int]:
    """(source vertices, destination vertices) of a DGL graph of one edge type: the sizes of that
    relation's two node types, read from DGL's graph index (num_src_nodes() sums over every source
    type in Python, and a sampled block is a new graph on every step)."""
    relations = g.canonical_etypes
    if len(relations) != 1:
        raise ValueError(f"heterogeneous DGL graphs are not supported (edge types: {relations}); "
                         "pass one relation at a time, e.g. g[etype]")
    source_type, _, destination_type = relations[0]
    index = g._graph
    return (index.num_nodes(g.get_ntype_id_from_src(source_type)),
            index.num_nodes(g.get_ntype_id_from_dst(destination_type)))


_DGL_EDGES_ENTRY = "_CAPI_DGLHeteroEdges"  # DGL's C entry point behind HeteroGraphIndex.edges (DGL 2.1)


def _dgl_edges_by_id(g) -> tuple[Tensor, Tensor]:
    """g.edges(order="eid") of a graph of one edge type, read from DGL's C library as DGL itself
    reads it, then handed to torch through DLPack as DGL does, without the Python wrapping between:
    that wrapping reads each array's shape through ctypes several times, 26 of the call's 30 us on a
    10-vertex graph, and a sampled block is a new graph on every step. DGL's own call where its C
    entry point is not found (another DGL version)."""
    read = getattr(sys.modules[type(g._graph).__module__], _DGL_EDGES_ENTRY, None)
    if read is None:
        return g.edges(order="eid")
    arrays = read(g._graph, 0, "eid")  # (src, dst, eid) of edge type 0, in edge id order
    return from_dlpack(arrays(0).to_dlpack()), from_dlpack(arrays(1).to_dlpack())


def by_neighbour(num_slots: int) -> bool:
    """Whether a graph of num_slots edge slots has each row's edges sorted by neighbour: from 2^20
    on. The CPU's sums over a graph whose gathered rows overflow the cache then take the neighbours
    in chunks that fit it (codegen/cstyle.py: render_source_chunks; 1.3-1.5x on the 1/8
    Reddit-scale graph's 64 and 128-wide sums). Sorting costs more than building unsorted (0.85 s
    against 0.35 s there), which a graph trained on for many epochs repays, and a sampled block
    (100k-300k edges, built every step, its sums a millisecond) would not. (A literal: TorchScript
    compiles this function.)"""
    return num_slots >= 1 << 20


SHARED_LAYOUT_EDGES = 1 << 16  # from_dgl: a graph's layouts below this many edges are its own (1.5 MB at most)
INT32_MAX = 2**31 - 1
_UNLISTED_AFTER_ROWS = object()  # Graph.listed: the slots after the rows' edges, derived when first read


def index_dtype(num_src: int, num_dst: int, num_edges: int) -> torch.dtype:
    """The dtype of a graph's arrays: int32 where every vertex, edge id and row pointer fits (half the
    memory of int64, and half the bytes a sweep reads per edge), int64 beyond. Kernels read either."""
    return torch.int32 if max(num_src, num_dst, num_edges) <= INT32_MAX else torch.int64


def _shared_dtype(arrays, num_src: int, num_dst: int) -> list[Tensor]:
    """Another library's arrays as a Graph holds them: shared where they already share one index dtype
    (converting would keep two copies while that library keeps its own), else in index_dtype."""
    dtypes = {t.dtype for t in arrays}
    dtype = dtypes.pop() if len(dtypes) == 1 else index_dtype(num_src, num_dst, arrays[1].numel())
    return [t.to(dtype).contiguous() for t in arrays]


def check_index_dtype(index: torch.Tensor, name: str = "edge_index", who: str = "") -> None:
    """Refuses indices that are not int32 or int64 (as PyG and DGL do): a float index would be truncated."""
    if index.dtype in (torch.int32, torch.int64):
        return
    why = ("; it requires grad, which only a floating-point tensor can: indices are not differentiable"
           if index.requires_grad else "")
    raise TypeError(f"{who}Expected '{name}' to be of integer type (int32 or int64), got {index.dtype}{why}. "
                    f"Build it as integers (torch.long); casting float indices would truncate them")


def _sizes(edge_index: torch.Tensor, size) -> tuple[int, int]:
    if size is None:
        n = int(edge_index.max()) + 1 if edge_index.numel() else 0
        return n, n
    pair = tuple(size) if isinstance(size, (tuple, list)) else (size, size)
    try:
        num_src, num_dst = (operator.index(s) for s in pair)  # any integer, numpy's included
    except (TypeError, ValueError):
        num_src = num_dst = -1
    if num_src < 0 or num_dst < 0:
        raise ValueError(f"'size' must be None, an int or a pair (num_src, num_dst) of non-negative ints, got {size!r}")
    return num_src, num_dst


def csr_layouts(src: Tensor, dst: Tensor, num_src: int, num_dst: int, listed: Optional[Tensor] = None,
                sort_by_neighbour: bool = False) -> list[Tensor]:
    """Both CSR layouts of the int64 edges src[k] -> dst[k], in the order Graph.tensors() gives them:
    each row's edges in edge order, or with sort_by_neighbour by their other end first.

    Built with ops whose output sizes follow from their input sizes (a stable argsort, then
    searchsorted for the row pointers), so torch.compile, torch.export and TorchScript trace it
    whole. Edges where `listed` is False stay in the arrays, after every row's edges, but belong
    to no row: kernels never visit them (the layers drop self-loops this way without a
    data-dependent size), so their values must still be valid indices."""
    in_indptr, in_eid = _csr(dst, src if sort_by_neighbour else None, num_dst, listed)
    out_indptr, out_eid = _csr(src, dst if sort_by_neighbour else None, num_src, listed)
    return [in_indptr, src[in_eid], in_eid, out_indptr, dst[out_eid], out_eid]


def graph_tensors(src: Tensor, dst: Tensor, num_src: int, num_dst: int,
                  listed: Optional[Tensor] = None) -> list[Tensor]:
    """Graph.from_edges(...).tensors() for the graph's device, built whole on every call and
    TorchScript-compatible: what a scripted layer passes its op."""
    src, dst = src.to(torch.int64), dst.to(torch.int64)
    check_edges(src, dst, num_src, num_dst)
    arrays = csr_layouts(src, dst, num_src, num_dst, listed, by_neighbour(src.numel()))
    if src.is_cuda:
        arrays += [heaviest_first(arrays[0]), heaviest_first(arrays[3])]
    return arrays


def _check_edge_range(src: Tensor, dst: Tensor, num_src: int, num_dst: int) -> None:
    """That every index is a vertex, in eager mode, naming the bad indices as PyG's checks do."""
    if src.numel() and min(int(src.min()), int(dst.min())) < 0:
        raise ValueError("Found negative indices in 'edge_index'; vertex indices start at 0")
    for name, idx, n in (("source (row 0)", src, num_src), ("destination (row 1)", dst, num_dst)):
        if idx.numel() and int(idx.max()) >= n:
            raise ValueError(f"Found {name} indices in 'edge_index' that are larger than {n - 1} (got "
                             f"{int(idx.max())}); pass size=(num_src, num_dst) that covers every vertex")


def check_edges(src: Tensor, dst: Tensor, num_src: int, num_dst: int) -> None:
    """That every index is a vertex, in a traced or scripted model, where Graph.from_edges' checks
    (with messages naming the index) cannot run: an assert the compiled graph runs without waiting
    for the device; in TorchScript, which drops such asserts, a check."""
    in_range = ((src >= 0) & (src < num_src)).all() & ((dst >= 0) & (dst < num_dst)).all()
    message = "Found indices in 'edge_index' that are negative or not smaller than the number of vertices; pass " \
              "edges between the vertices"
    if torch.jit.is_scripting():
        if not bool(in_range):
            raise ValueError(message)
    else:
        torch._assert_async(in_range, message)


def heaviest_first(indptr: Tensor) -> Tensor:
    """The rows of a CSR by degree, heaviest first (GPU kernels take rows in this order, so hubs
    start early, not last)."""
    return torch.argsort(indptr[1:] - indptr[:-1], descending=True, stable=True).to(indptr.dtype)


def _csr(keys: Tensor, others: Optional[Tensor], n: int, listed: Optional[Tensor]) -> tuple[Tensor, Tensor]:
    """indptr over n rows and the permutation that sorts the edges by key, then (where `others` is
    given) by their other end, then by position; the unlisted edges, after every row, by position."""
    if listed is not None:
        keys = torch.where(listed, keys, n)  # after every row: counted by no indptr entry
    if others is None:
        perm = torch.argsort(keys, stable=True)
    else:
        if listed is not None:
            others = torch.where(listed, others, 0)
        by_other = torch.argsort(others, stable=True)
        perm = by_other[torch.argsort(keys[by_other], stable=True)]
    indptr = torch.searchsorted(keys[perm], torch.arange(n + 1, dtype=keys.dtype, device=keys.device))
    return indptr, perm


class _GraphCache:
    """Graphs built from user objects, kept while the object lives.

    An entry is found by the object's identity (through a weak reference, so a recycled id never
    matches) and whatever processing the caller names, and is used while the caller's stamp of the
    object's edges (version counter, shape, fingerprint) is unchanged; a changed stamp rebuilds and
    replaces it. An entry goes when its object is freed, or when more than `capacity` objects are
    live (oldest first). An epoch loop over one edge_index converts it once.
    """

    def __init__(self, capacity: int = 32):
        self.capacity = capacity
        self._entries: OrderedDict = OrderedDict()  # (id(obj), key) -> (weak ref, stamp, Graph)
        self._lock = threading.RLock()  # entries also go from weakref callbacks, in any thread
        self.builds = 0  # tests read it to prove a second forward does not rebuild

    def get(self, obj, key: tuple, build, stamp=None) -> "Graph":
        # tensors made in inference mode cannot be saved for a backward outside it: one graph for each
        full_key = (id(obj), key, torch.is_inference_mode_enabled())
        with self._lock:
            entry = self._entries.get(full_key)
            if entry is not None and entry[0]() is obj and entry[1] == stamp:
                self._entries.move_to_end(full_key)
                return entry[2]
        graph = build()
        self.builds += 1
        try:
            ref = weakref.ref(obj, functools.partial(self._forget, full_key))
        except TypeError:
            return graph
        with self._lock:
            self._entries[full_key] = (ref, stamp, graph)
            self._entries.move_to_end(full_key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return graph

    def _forget(self, full_key, ref) -> None:
        with self._lock:
            entry = self._entries.get(full_key)
            if entry is not None and entry[0] is ref:
                del self._entries[full_key]


graph_cache = _GraphCache()

_FINGERPRINT_BLOCK = 4096


@functools.lru_cache(maxsize=8)
def _odd_weights(n: int, seed: int) -> torch.Tensor:
    return torch.randint(-2**62, 2**62, (n,), generator=torch.Generator().manual_seed(seed)) | 1


@functools.lru_cache(maxsize=1)
def _extension():
    """seastar_layers._C where it is loaded (it defines the ops), else None."""
    from .runtime import prebuilt

    if prebuilt.load_extension() is not None:
        return None
    from . import _C

    return _C


def _fingerprint(t: torch.Tensor) -> int:
    """A 64-bit hash of an index array: its words times fixed random odd weights, summed mod 2**64.
    Changing one index always changes it; an edit whose changes are all multiples of 2**k goes
    unseen with a chance of about 2**(k - 63). It reads the array once. On the CPU the extension
    hashes it at close to memory speed (14 ms for a (2, 14.3M) edge_index on 2 cores, where torch's
    sum takes 11 and the cheapest layer step over that graph 200 ms); without the extension, and on
    a GPU, torch does, in about twice the time. Index arrays of a sparse layout are hashed each,
    then combined."""
    if t.is_cpu and t.layout == torch.strided and _extension() is not None:  # how layers' edge_index come
        words = t if t.is_contiguous() else t.contiguous()  # held here while the extension reads its bytes
        return _extension().fingerprint_memory(words.data_ptr(), words.nbytes, torch.get_num_threads())
    if t.layout != torch.strided:
        parts = {torch.sparse_coo: lambda: [t._indices()],
                 torch.sparse_csr: lambda: [t.crow_indices(), t.col_indices()],
                 torch.sparse_csc: lambda: [t.ccol_indices(), t.row_indices()]}[t.layout]()
        return hash(tuple(_fingerprint(p) for p in parts))
    if t.device.type == "cpu" and t.numel() <= _FINGERPRINT_BLOCK:
        return hash(t.contiguous().numpy().tobytes())  # exactly the bytes: cheaper than the products below
    flat = t.reshape(-1)
    if flat.dtype == torch.int32 and flat.numel() % 2 == 0 and flat.storage_offset() % 2 == 0:
        flat = flat.view(torch.int64)  # pairs of indices as one word: converting would cost more than hashing
    flat = flat.to(torch.int64)
    block = _odd_weights(_FINGERPRINT_BLOCK, 0).to(flat.device)
    full = flat.numel() // _FINGERPRINT_BLOCK
    blocks = flat[:full * _FINGERPRINT_BLOCK].view(full, _FINGERPRINT_BLOCK)
    # a matrix-vector product reads the array at memory speed; int64 mv exists on the CPU only
    per_block = blocks.mv(block) if blocks.device.type == "cpu" else (blocks * block).sum(1)
    tail = flat[full * _FINGERPRINT_BLOCK:]
    per_block = torch.cat([per_block, (tail * block[:tail.numel()]).sum().view(1)])
    # a product and a sum, not a dot: CUDA has no int64 dot
    return int((per_block * _odd_weights(per_block.numel(), 1).to(flat.device)).sum())


def as_graph(graph, size=None, key: tuple = (), build=None) -> Graph:
    """A Graph from a Graph, an edge_index tensor (or PyG EdgeIndex), or a DGLGraph / DGL block.

    Conversions are cached per object (see _GraphCache). `build(obj) -> Graph` replaces the plain
    conversion of a tensor (layers use it to add self-loops first); `key` names that processing."""
    if isinstance(graph, Graph):
        if size is not None:
            raise ValueError("pass 'size' only with an edge_index tensor; a Graph already knows its sizes")
        return graph
    if isinstance(graph, torch.Tensor):
        # a plain edge_index, as most calls pass, skips the look for PyG's EdgeIndex
        edge_index_class = type(graph) is not torch.Tensor and hasattr(graph, "as_tensor")
        plain = graph.as_tensor() if edge_index_class else graph
        strided = plain.layout == torch.strided
        if strided:
            check_index_dtype(plain)
        if not strided and build is None:
            raise TypeError("a torch sparse adjacency is accepted by the layers, not by compiled programs; "
                            "pass edge_index = adj_t.to_sparse_coo().indices().flip(0)")
        # an in-place edit bumps the version; the fingerprint sees edits that do not (inference tensors have none)
        version = None if plain.is_inference() else plain._version
        stamp = (version, plain.shape, plain.dtype, plain.device, plain.layout, _fingerprint(plain))
        if not strided:
            return graph_cache.get(graph, (size,) + key, lambda: build(plain), stamp)
        if size is None and edge_index_class and hasattr(graph, "sparse_size"):
            sizes = graph.sparse_size()
            size = tuple(sizes) if None not in sizes else None
        if build is None and edge_index_class and getattr(graph, "is_sorted", False) and size is not None:
            make = lambda: Graph.from_sorted_edge_index(graph, _sizes(plain, size))  # noqa: E731 - its own CSR/CSC
        else:
            make = (lambda: build(plain)) if build is not None else (lambda: Graph.from_edge_index(plain, size))
        return graph_cache.get(graph, (size,) + key, make, stamp)
    if type(graph).__name__ in ("DGLGraph", "DGLBlock") or hasattr(graph, "adj_tensors"):
        if size is not None:
            raise ValueError("pass 'size' only with an edge_index tensor; a DGL graph already knows its sizes")
        # DGL's graph index is immutable: editing a DGLGraph's edges gives it a new one
        sizes = dgl_sizes(graph)
        return graph_cache.get(graph._graph, ("dgl", *sizes) + key, lambda: Graph.from_dgl(graph, sizes))
    raise TypeError(f"the graph must be an edge_index tensor of shape (2, E), a PyG EdgeIndex, a DGLGraph or block, "
                    f"or a seastar_layers.Graph; got {type(graph).__name__}")


def _vertex_count(name: str, value) -> int:
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"sl.Graph: '{name}' must be an int, got {type(value).__name__}") from None
    if n < 0:
        raise ValueError(f"sl.Graph: '{name}' must be >= 0, got {n}")
    return n


def _index_arrays(named: dict) -> list[torch.Tensor]:
    """The arrays as contiguous int64 tensors on one device (to be checked), or a TypeError/ValueError naming the
    one that is not."""
    out = []
    device = None
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"sl.Graph: '{name}' must be a 1-d torch.Tensor of int32 or int64, got {type(t).__name__}")
        check_index_dtype(t, name, "sl.Graph: ")
        if t.dim() != 1:
            raise ValueError(f"sl.Graph: '{name}' must be 1-d, got shape {tuple(t.shape)}")
        if device is not None and t.device != device:
            raise ValueError(f"sl.Graph: all arrays must be on one device; '{name}' is on {t.device}, "
                             f"'{next(iter(named))}' on {device}")
        device = t.device
        out.append(t.to(torch.int64).contiguous())
    return out


def _layouts_problem(in_indptr, in_src, in_eid, out_indptr, out_dst, out_eid, num_src: int, num_dst: int):
    """What makes the six int64 arrays something a kernel cannot safely index, or None."""
    return (_csr_problem(("in_indptr", "in_src", "in_eid"), in_indptr, in_src, in_eid, num_dst, num_src)
            or _csr_problem(("out_indptr", "out_dst", "out_eid"), out_indptr, out_dst, out_eid, num_src, num_dst)
            or (f"the layouts hold different numbers of edges ({in_src.numel()} in, {out_dst.numel()} out)"
                if in_src.numel() != out_dst.numel() else None))


def _csr_problem(names, indptr, indices, eids, rows: int, cols: int):
    """What makes (indptr, indices, eids) something other than a CSR over rows x cols, or None."""
    ptr, idx, ids = names
    num_edges = indices.numel()
    if indptr.numel() != rows + 1:
        return f"'{ptr}' must have {rows + 1} entries (one more than its rows), got {indptr.numel()}"
    if eids.numel() != num_edges:
        return f"'{ids}' must have one entry per edge ({num_edges}, the length of '{idx}'), got {eids.numel()}"
    if int(indptr[0]) != 0 or int(indptr[-1]) != num_edges:
        return (f"'{ptr}' must start at 0 and end at the number of edges {num_edges}, got {int(indptr[0])} .. "
                f"{int(indptr[-1])}")
    if bool((indptr[1:] < indptr[:-1]).any()):
        return f"'{ptr}' must be non-decreasing"
    if num_edges and (int(indices.min()) < 0 or int(indices.max()) >= cols):
        return f"'{idx}' must hold vertex indices in [0, {cols}), got {int(indices.min())} .. {int(indices.max())}"
    if num_edges and (int(eids.min()) < 0 or int(eids.max()) >= num_edges):
        return f"'{ids}' must hold edge ids in [0, {num_edges}), got {int(eids.min())} .. {int(eids.max())}"
    return None


def _same_edges_problem(in_indptr, in_src, in_eid, out_indptr, out_dst, out_eid):
    """What makes two safe layouts disagree on the edges (each id 0..E-1 once, naming one edge), or None."""
    num_edges = in_src.numel()
    for name, eids in (("in_eid", in_eid), ("out_eid", out_eid)):
        if not bool((torch.bincount(eids, minlength=num_edges) == 1).all()):
            return f"'{name}' must hold every edge id 0..{num_edges - 1} exactly once"
    src_by_id, dst_by_id = torch.empty_like(in_src), torch.empty_like(in_src)
    src_by_id[in_eid], dst_by_id[in_eid] = in_src, _rows(in_indptr)
    if not (torch.equal(src_by_id[out_eid], _rows(out_indptr)) and torch.equal(dst_by_id[out_eid], out_dst)):
        return ("the in-edge layout (in_indptr, in_src, in_eid) and the out-edge layout (out_indptr, out_dst, "
                "out_eid) describe different edges for the same edge ids")
    return None


def _rows(indptr: torch.Tensor) -> torch.Tensor:
    """The row of every entry of a CSR."""
    counts = indptr[1:] - indptr[:-1]
    return torch.repeat_interleave(torch.arange(counts.numel(), device=indptr.device), counts)
