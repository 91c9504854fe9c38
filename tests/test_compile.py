"""The layers inside torch.compile(fullgraph=True) and torch.export: no graph breaks, outputs and
gradients equal to eager, an exported program that runs in a fresh process.

Most cases compile with the aot_eager backend (dynamo and AOTAutograd, through the ops' fake and
autograd implementations, without inductor's code generation, which takes tens of seconds per
model on two cores); one PyG and one DGL model compile with inductor, the default backend."""
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch._dynamo
from helpers import random_graph

import seastar_layers as sl

N, F_IN = 30, 12
EI = random_graph(N, N, 120, seed=5)  # with a self-loop, multi-edges, isolated vertices
E = EI.shape[1]


def tensors(seed):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(N, F_IN, generator=gen), torch.randn(E, 3, generator=gen), torch.rand(E, generator=gen) + 0.1)


def check_compiled(model, *args, backend="aot_eager"):
    """fullgraph compile of `model` (eval mode): no graph break, outputs and every gradient equal to eager."""
    explanation = torch._dynamo.explain(model)(*args)
    assert explanation.graph_break_count == 0, [str(r.reason)[:300] for r in explanation.break_reasons]
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()] + list(model.parameters())
    results = []
    for run in (compiled, model):
        inputs = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                  for a in args]
        out = run(*inputs)
        projection = torch.randn(out.shape, generator=torch.Generator().manual_seed(0), dtype=out.dtype)
        floats = [a for a in inputs if isinstance(a, torch.Tensor) and a.is_floating_point()]
        grads = torch.autograd.grad((out * projection).sum(), floats + list(model.parameters()), allow_unused=True)
        results.append((out, grads))
    (out, grads), (want, want_grads) = results
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    assert len(grads) == len(leaves)
    for g, w in zip(grads, want_grads, strict=True):
        if w is None:
            assert g is None or not g.any()
        else:
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


class PygModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gat = sl.GATConv(F_IN, 8, heads=2, edge_dim=3, fill_value="mean")
        self.gcn = sl.GCNConv(F_IN, 16)
        self.appnp = sl.APPNP(K=3, alpha=0.1)

    def forward(self, x, edge_index, edge_attr, edge_weight):
        h = torch.relu(self.gat(x, edge_index, edge_attr) + self.gcn(x, edge_index, edge_weight))
        return self.appnp(h, edge_index, edge_weight)


def test_pyg_model_with_inductor():
    torch.manual_seed(0)
    x, edge_attr, weight = tensors(1)
    check_compiled(PygModel().eval(), x, EI, edge_attr, weight, backend="inductor")


class One(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, *args, **kwargs):
        return self.layer(*args, **kwargs)


PYG_CASES = {
    "gat": lambda: (sl.GATConv(F_IN, 5, heads=3), ()),
    "gat-mean-heads": lambda: (sl.GATConv(F_IN, 5, heads=3, concat=False, negative_slope=0.3), ()),
    "gat-no-loops": lambda: (sl.GATConv(F_IN, 4, add_self_loops=False), ()),
    "gat-edge-attr-fill": lambda: (sl.GATConv(F_IN, 4, heads=2, edge_dim=3, fill_value=0.5), ("edge_attr",)),
    "gat-edge-attr-tensor": lambda: (sl.GATConv(F_IN, 4, edge_dim=3, fill_value=torch.ones(3)), ("edge_attr",)),
    "gat-residual": lambda: (sl.GATConv(F_IN, 4, heads=2, residual=True), ()),
    "gat-target-to-source": lambda: (sl.GATConv(F_IN, 4, flow="target_to_source"), ()),
    "gcn": lambda: (sl.GCNConv(F_IN, 6), ()),
    "gcn-weights-improved": lambda: (sl.GCNConv(F_IN, 6, improved=True), ("edge_weight",)),
    "gcn-no-loops": lambda: (sl.GCNConv(F_IN, 6, add_self_loops=False), ("edge_weight",)),
    "gcn-unnormalised": lambda: (sl.GCNConv(F_IN, 6, normalize=False), ("edge_weight",)),
    "gcn-target-to-source": lambda: (sl.GCNConv(F_IN, 6, flow="target_to_source"), ()),
    "appnp": lambda: (sl.APPNP(K=2, alpha=0.2), ()),
    "appnp-weights": lambda: (sl.APPNP(K=2, alpha=0.2), ("edge_weight",)),
    "sage": lambda: (sl.SAGEConv(F_IN, 6), ()),
    "sage-wide-max": lambda: (sl.SAGEConv(F_IN, 20, aggr="max", normalize=True), ()),
    "sage-sum-project": lambda: (sl.SAGEConv(F_IN, 6, aggr="sum", project=True), ()),
    "gin": lambda: (sl.GINConv(torch.nn.Linear(F_IN, 6), train_eps=True), ()),
}


@pytest.mark.parametrize("case", PYG_CASES)
def test_pyg_layer_options(case):
    torch.manual_seed(0)
    layer, extra = PYG_CASES[case]()
    x, edge_attr, weight = tensors(2)
    args = [x, EI] + [{"edge_attr": edge_attr, "edge_weight": weight}[name] for name in extra]
    check_compiled(One(layer).eval(), *args)


def test_pyg_bipartite_gat():
    gen = torch.Generator().manual_seed(3)
    x_src, x_dst = torch.randn(N, F_IN, generator=gen), torch.randn(9, 7, generator=gen)
    ei = random_graph(N, 9, 60, seed=4)

    class Bipartite(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = sl.GATConv((F_IN, 7), 4, heads=2)

        def forward(self, x_src, x_dst, edge_index):
            return self.layer((x_src, x_dst), edge_index, size=(N, 9))

    check_compiled(Bipartite().eval(), x_src, x_dst, ei)

    class Block(torch.nn.Module):  # the destinations as the first sources, x[:n] (eager projects them once)
        def __init__(self):
            super().__init__()
            self.layer = sl.GATConv(F_IN, 4, heads=2)

        def forward(self, x, edge_index):
            return self.layer((x, x[:9]), edge_index, size=(N, 9))

    check_compiled(Block().eval(), x_src, ei)


def test_pyg_static_graph_features():
    x = torch.randn(3, N, F_IN, generator=torch.Generator().manual_seed(6))
    check_compiled(One(sl.GCNConv(F_IN, 5, node_dim=-2)).eval(), x, EI)


def test_training_mode_dropout_compiles_and_differentiates():
    """Dropout on attention and on APPNP's edges: one draw per edge slot inside the compiled graph
    (PyG's own draws are one per edge it keeps, a data-dependent count), so the outputs are not
    eager's, but the same distribution; p=0 gives eager's exactly."""
    torch.manual_seed(0)
    x, _, weight = tensors(7)
    gat, appnp = sl.GATConv(F_IN, 4, heads=2, dropout=0.5), sl.APPNP(K=2, alpha=0.1, dropout=0.3)

    class Train(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gat, self.appnp = gat, appnp

        def forward(self, x, edge_index):
            return self.appnp(self.gat(x, edge_index), edge_index)

    model = Train().train()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    out = compiled(x, EI)
    out.sum().backward()
    assert out.shape == (N, 8) and all(p.grad is not None and torch.isfinite(p.grad).all() for p in gat.parameters())
    gat.dropout, appnp.dropout = 0.0, 0.0
    torch.testing.assert_close(compiled(x, EI), model(x, EI))


def test_a_bad_index_raises_inside_the_compiled_graph():
    """The index check is an assert in the compiled graph, before anything indexes with them."""
    compiled = torch.compile(One(sl.GCNConv(F_IN, 4)).eval(), fullgraph=True, backend="aot_eager")
    x = tensors(8)[0]
    compiled(x, EI)
    bad = EI.clone()
    bad[0, 3] = N + 4
    with pytest.raises(RuntimeError, match="Found indices in 'edge_index'"):
        compiled(x, bad)


# -- DGL -------------------------------------------------------------------------------------
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from seastar_layers.compat import import_dgl

    dgl = import_dgl()
    import seastar_layers.dgl as sd


def dgl_graph():
    return sd.prepare(dgl.add_self_loop(dgl.graph((EI[0], EI[1]), num_nodes=N)))


class DglModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gat = sd.GATConv(F_IN, 4, 2, residual=True)
        self.conv = sd.GraphConv(F_IN, 8)
        self.appnp = sd.APPNPConv(2, 0.1)

    def forward(self, g, x, edge_weight):
        h = torch.relu(self.gat(g, x).flatten(1) + self.conv(g, x, edge_weight=edge_weight))
        return self.appnp(g, h, edge_weight)


def test_dgl_model_with_inductor():
    torch.manual_seed(0)
    g = dgl_graph()
    x, weight = tensors(9)[0], torch.rand(g.num_edges(), generator=torch.Generator().manual_seed(1)) + 0.1
    check_compiled(DglModel().eval(), g, x, weight, backend="inductor")


@pytest.mark.parametrize("norm", ["both", "left", "right", "none"])
def test_dgl_graphconv_norms(norm):
    g = dgl_graph()
    weight = torch.rand(g.num_edges(), generator=torch.Generator().manual_seed(2)) + 0.1
    check_compiled(One(sd.GraphConv(F_IN, 5, norm=norm)).eval(), g, tensors(10)[0], None, weight)


def test_dgl_sampled_block():
    """A block from DGL's neighbour sampler: destinations are the first sources."""
    from test_dgl_layers import F_IN as BLOCK_F_IN
    from test_dgl_layers import sampled_blocks

    block = sd.prepare(sampled_blocks()[0])
    x = torch.randn(block.num_src_nodes(), BLOCK_F_IN, generator=torch.Generator().manual_seed(11))
    num_dst = block.num_dst_nodes()  # read outside: DGL's C library cannot be traced

    class OnBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gat, self.conv = sd.GATConv(BLOCK_F_IN, 3, 2), sd.GraphConv(BLOCK_F_IN, 3)

            self.sage, self.gin = sd.SAGEConv(BLOCK_F_IN, 6, "pool"), sd.GINConv(torch.nn.Linear(BLOCK_F_IN, 6), "mean")

        def forward(self, block, x):
            pair = (x, x[:num_dst])  # as DGL's examples pass a block's features
            return self.gat(block, x).flatten(1) + self.conv(block, x).repeat(1, 2) + self.gat(block, pair).flatten(1) \
                + self.sage(block, x) + self.gin(block, pair)

    check_compiled(OnBlock().eval(), block, x)


def test_unprepared_dgl_graph_names_the_fix():
    g = dgl.add_self_loop(dgl.graph((EI[0], EI[1]), num_nodes=N))
    with pytest.raises(Exception, match=r"seastar_layers.dgl.prepare\(g\)"):
        torch.compile(One(sd.GraphConv(F_IN, 4)), fullgraph=True, backend="aot_eager")(g, tensors(12)[0])


# -- torch.export ----------------------------------------------------------------------------
def test_export_runs_in_a_fresh_process(tmp_path):
    torch.manual_seed(0)
    model = PygModel().eval()
    x, edge_attr, weight = tensors(13)
    exported = torch.export.export(model, (x, EI, edge_attr, weight))
    names = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    # the layers' ops, by their stable names: GAT's and GCN's composites (csrc/layer_ops.cpp), which
    # export keeps whole, and APPNP's step with edge weights
    assert {"seastar_layers.gat_conv.default", "seastar_layers.gcn_conv.default",
            "seastar_layers.appnp_step.default"} <= names, names
    torch.export.save(exported, tmp_path / "model.pt2")
    torch.save({"args": (x, EI, edge_attr, weight), "out": model(x, EI, edge_attr, weight)}, tmp_path / "io.pt")
    script = textwrap.dedent(f"""
        import torch
        import seastar_layers  # defines torch.ops.seastar_layers
        program = torch.export.load({str(tmp_path / "model.pt2")!r})
        io = torch.load({str(tmp_path / "io.pt")!r})
        torch.testing.assert_close(program.module()(*io["args"]), io["out"])
        print("exported ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "exported ok" in result.stdout, result.stderr[-3000:]
