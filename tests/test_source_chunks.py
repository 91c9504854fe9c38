"""Source-chunked sweeps (codegen/cstyle.py: render_source_chunks): where a sum's gathered rows overflow
a core's cache, a CPU kernel takes the neighbours in chunks that fit it, each row carrying its sums and
its place among its edges from chunk to chunk. It must compute the same bits as one sweep, forward and
backward, for every op and layer that sums over neighbours, whatever the chunks and the rows hold; the
plain sweep is what the other tests check against PyG, DGL and the oracle.

SEASTAR_SOURCE_CHUNK_BYTES sets the chunks' size (0: one sweep), so that small graphs take many chunks;
their rows are sorted by neighbour as a large graph's are (graph.by_neighbour), or the kernels would
take one sweep (each kernel probes whether they are)."""
import pytest
import torch
from helpers import assert_close, grads, oracle, random_graph
from test_language import CASES, features

import seastar_layers as sl
from seastar_layers.compat import import_dgl
from seastar_layers.graph import Graph
from seastar_layers.nn.programs import weighted_sum
from seastar_layers import config

OPS = torch.ops.seastar_layers
CHUNK_BYTES = config.SOURCE_CHUNK_BYTES


def skewed_edges(num_src: int, num_dst: int, num_edges: int, seed: int) -> torch.Tensor:
    """Random edges whose destinations leave some rows empty and give a few many edges, in random
    order (the build sorts each row by neighbour)."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_src, (num_edges,), generator=gen)
    dst = (torch.rand(num_edges, generator=gen) ** 3 * (num_dst * 3 // 4)).long()  # the last quarter empty
    return torch.stack([src, dst])


def sorted_graph(edge_index: torch.Tensor, num_src: int, num_dst: int) -> Graph:
    """The graph with each row's edges sorted by neighbour, as from_edges builds a large graph."""
    arrays = OPS.csr_layouts(edge_index[0], edge_index[1], num_src, num_dst, by_neighbour=True)
    for indptr, others in ((arrays[0], arrays[1]), (arrays[3], arrays[4])):
        in_order = others[1:] >= others[:-1]
        starts = indptr[1:-1]
        in_order[starts[(starts > 0) & (starts < others.numel())] - 1] = True  # a row's first edge follows another
        assert bool(in_order.all())
    return Graph(*arrays, num_src, num_dst)


def plain_and_chunked(monkeypatch, run, chunk_bytes: int):
    """run()'s tensors in one sweep and in chunks of chunk_bytes of gathered rows."""
    monkeypatch.setenv(CHUNK_BYTES, "0")
    plain = run()
    monkeypatch.setenv(CHUNK_BYTES, str(chunk_bytes))
    return plain, run()


def assert_same_bits(plain, chunked):
    assert len(plain) == len(chunked)
    for k, (p, c) in enumerate(zip(plain, chunked, strict=True)):
        if p is None and c is None:  # an input no result depends on
            continue
        assert p.dtype == c.dtype and torch.equal(p, c), f"result {k} differs: {(p - c).abs().max()}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("width", [64, 41, 5])
@pytest.mark.parametrize("with_weight", [False, True])
def test_weighted_sum_op_in_chunks_gives_the_same_bits(monkeypatch, dtype, width, with_weight):
    """The prebuilt weighted_sum op, forward and both gradients, on a bipartite graph (more sources
    than destinations, empty rows, rows of many edges) in chunks of 3 to 64 rows."""
    num_src, num_dst = 700, 300
    graph = sorted_graph(skewed_edges(num_src, num_dst, 9000, seed=width), num_src, num_dst)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(num_src, width, generator=gen).to(dtype).requires_grad_()
    w = torch.rand(graph.num_edges, generator=gen).to(dtype).requires_grad_() if with_weight else None
    grad = torch.randn(num_dst, width, generator=gen).to(dtype)

    def run():
        out = OPS.weighted_sum(graph.op_tensors(), x, w)[0][0]
        inputs = [x] + ([w] if with_weight else [])
        return [out.detach(), *torch.autograd.grad(out, inputs, grad)]

    row_bytes = width * x.element_size()
    for rows_per_chunk in (3, 64):
        assert_same_bits(*plain_and_chunked(monkeypatch, run, rows_per_chunk * row_bytes))


def test_chunked_sums_match_torch_and_pass_gradcheck(monkeypatch):
    """A compiled program's sum in chunks (float64, through the JIT's kernels): torch's sums, and
    gradcheck."""
    monkeypatch.setenv(CHUNK_BYTES, str(8 * 8 * 4))  # 4 source rows of 8 doubles a chunk
    ei = skewed_edges(40, 30, 300, seed=2)
    graph = sorted_graph(ei, 40, 30)
    program = weighted_sum(True, declared=False)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(40, 8, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.rand(ei.shape[1], dtype=torch.float64, generator=gen, requires_grad=True)
    expected = torch.zeros(30, 8, dtype=torch.float64).index_add_(0, ei[1], w[:, None] * x[ei[0]])
    torch.testing.assert_close(program(graph, x=x, w=w), expected)
    assert torch.autograd.gradcheck(lambda x, w: program(graph, x=x, w=w), (x, w))


def test_rows_not_sorted_by_neighbour_give_the_same_bits(monkeypatch):
    """A graph built from layouts whose rows are not sorted by neighbour (as another library's,
    shared) takes one sweep or chunks alike: the same bits, each edge added once."""
    built = sorted_graph(skewed_edges(500, 200, 6000, seed=4), 500, 200)
    arrays = [t.clone() for t in built.tensors()]
    for indptr, nbrs, eids in (arrays[:3], arrays[3:]):  # each row's edges reversed
        for r in range(indptr.numel() - 1):
            begin, end = int(indptr[r]), int(indptr[r + 1])
            nbrs[begin:end], eids[begin:end] = nbrs[begin:end].flip(0), eids[begin:end].flip(0)
    graph = Graph(*arrays, 500, 200)
    x = torch.randn(500, 16, dtype=torch.float64, requires_grad=True)

    def run():
        out = OPS.weighted_sum(graph.op_tensors(), x, None)[0][0]
        return [out.detach(), *torch.autograd.grad(out.sum(), x)]

    plain, chunked = plain_and_chunked(monkeypatch, run, 16 * 8 * 10)
    assert_same_bits(plain, chunked)
    src, dst = built.endpoints()
    expected = torch.zeros(200, 16, dtype=torch.float64).index_add_(0, dst, x.detach()[src])
    torch.testing.assert_close(plain[0], expected)


@pytest.mark.parametrize("layer", ["GCNConv", "APPNP", "GraphConv", "APPNPConv"])
def test_layers_in_chunks_give_the_same_bits(monkeypatch, layer):
    """The drop-ins whose sweeps are sums (PyG's GCNConv and APPNP, DGL's GraphConv and APPNPConv),
    training mode, outputs and every gradient, on a graph large enough for their fused paths, built
    with its rows sorted by neighbour."""
    monkeypatch.setattr(sl.graph, "by_neighbour", lambda num_slots: True)
    n = 600
    ei = random_graph(n, n, 12000, seed=7)
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(n, 24, generator=gen, requires_grad=True)
    if layer in ("GCNConv", "APPNP"):
        torch.manual_seed(0)
        module = sl.GCNConv(24, 40) if layer == "GCNConv" else sl.APPNP(K=4, alpha=0.1)

        def call():
            return module(x, ei)
    else:
        dgl = import_dgl()
        from seastar_layers import dgl as sl_dgl

        g = dgl.graph((ei[0], ei[1]), num_nodes=n)
        torch.manual_seed(0)
        module = (sl_dgl.GraphConv(24, 40, allow_zero_in_degree=True) if layer == "GraphConv"
                  else sl_dgl.APPNPConv(k=4, alpha=0.1))

        def call():
            return module(g, x)

    params = [p for p in module.parameters()]

    def run():
        out = call()
        grads = torch.autograd.grad(out, [x, *params], torch.ones_like(out))
        return [out.detach(), *grads]

    assert_same_bits(*plain_and_chunked(monkeypatch, run, 8 * 4 * 24))


@pytest.mark.parametrize("fn,names", CASES, ids=[c[0].__name__ for c in CASES])
def test_every_construct_in_chunks_gives_the_same_bits(monkeypatch, fn, names):
    """Every construct of the language (test_language's programs, whose sums of one shape are the
    kernels that take chunks) on a bipartite graph, in chunks of one or two sources: one sweep's
    bits, forward and gradients, and the oracle's values."""
    ei = random_graph(17, 11, 60, seed=2)
    graph = sorted_graph(ei, 17, 11)
    feats = features(torch.float64, 17, 11, ei.shape[1])
    used = {n: feats[n] for n in names}
    program = sl.compile(fn)

    def run():
        out = program(graph, **used)
        outs = list(out) if isinstance(out, tuple) else [out]
        return [o.detach() for o in outs] + list(grads(out, list(used.values())))

    plain, chunked = plain_and_chunked(monkeypatch, run, 64)
    assert_same_bits(plain, chunked)
    expected = oracle(fn, ei, 11, program(graph, **used), **used)
    assert_close(program(graph, **used), expected)


@pytest.mark.parametrize("width", [16, 41, 80, 105, 112])
def test_row_remainders_sum_as_torch(width):
    """A row's features beyond its full 64-wide blocks go in 16-wide blocks where they are a multiple of
    16 (16, 80 = 64 + 16, 112 = 64 + 48) and in one pass of run-time width otherwise (41, 105 = 64 +
    41): every width sums as torch does, forward and both gradients, in one sweep."""
    ei = skewed_edges(90, 60, 900, seed=width)
    graph = sorted_graph(ei, 90, 60)
    x = torch.randn(90, width, dtype=torch.float64, requires_grad=True)
    w = torch.rand(ei.shape[1], dtype=torch.float64, requires_grad=True)
    out = OPS.weighted_sum(graph.op_tensors(), x, w)[0][0]
    expected = torch.zeros(60, width, dtype=torch.float64).index_add(0, ei[1], w[:, None] * x[ei[0]])
    torch.testing.assert_close(out, expected)
    grad = torch.randn(60, width, dtype=torch.float64)
    for got, want in zip(torch.autograd.grad(out, (x, w), grad), torch.autograd.grad(expected, (x, w), grad),
                         strict=True):
        torch.testing.assert_close(got, want)


def test_tuned_chunks_give_the_same_bits(monkeypatch):
    """Without SEASTAR_SOURCE_CHUNK_BYTES a sweep whose rows overflow two of the smallest candidate
    chunks (7/8 of L2: here 5 MB of rows) tunes its chunk on its first call, sweeping once per
    candidate, and keeps the fastest: the first call and the later ones give one sweep's bits."""
    num_src, num_dst = 20000, 3000
    graph = sorted_graph(skewed_edges(num_src, num_dst, 200_000, seed=5), num_src, num_dst)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(num_src, 64, generator=gen).requires_grad_()
    grad = torch.randn(num_dst, 64, generator=gen)

    def run():
        out = OPS.weighted_sum(graph.op_tensors(), x, None)[0][0]
        return [out.detach(), *torch.autograd.grad(out, [x], grad)]

    monkeypatch.setenv(CHUNK_BYTES, "0")
    plain = run()
    monkeypatch.delenv(CHUNK_BYTES)
    for _ in range(3):
        assert_same_bits(plain, run())
