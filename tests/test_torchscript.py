"""torch.jit.script of the PyG layers (PyG's own tests script its layers): the scripted layer runs the
fused op and equals the eager one and PyG's scripted layer; an option only PyG's own message passing
can honour is refused by name when scripting starts."""
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from helpers import random_graph

import seastar_layers as sl

N, F_IN = 25, 10
EI = random_graph(N, N, 90, seed=2)


def data(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(N, F_IN, generator=gen), torch.randn(EI.shape[1], 3, generator=gen), \
        torch.rand(EI.shape[1], generator=gen)


def scripted(layer):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.script's own deprecation notice
        return torch.jit.script(layer)


CASES = {
    "gcn": lambda x, ea, w: (sl.GCNConv(F_IN, 6), (x, EI)),
    "gcn-weights": lambda x, ea, w: (sl.GCNConv(F_IN, 6, improved=True), (x, EI, w)),
    "gcn-unnormalised": lambda x, ea, w: (sl.GCNConv(F_IN, 6, normalize=False), (x, EI, w)),
    "gcn-target-to-source": lambda x, ea, w: (sl.GCNConv(F_IN, 6, flow="target_to_source"), (x, EI)),
    "gcn-static-graph": lambda x, ea, w: (sl.GCNConv(F_IN, 6, node_dim=-2), (torch.stack([x, -x]), EI)),
    "appnp": lambda x, ea, w: (sl.APPNP(K=3, alpha=0.1), (x, EI)),
    "appnp-weights-no-loops": lambda x, ea, w: (sl.APPNP(K=2, alpha=0.3, add_self_loops=False), (x, EI, w)),
    "gat": lambda x, ea, w: (sl.GATConv(F_IN, 4, heads=3), (x, EI)),
    "gat-mean": lambda x, ea, w: (sl.GATConv(F_IN, 4, heads=2, concat=False, residual=True), (x, EI)),
    "gat-no-loops": lambda x, ea, w: (sl.GATConv(F_IN, 4, add_self_loops=False, bias=False), (x, EI)),
    "gat-edge-attr-mean": lambda x, ea, w: (sl.GATConv(F_IN, 4, heads=2, edge_dim=3), (x, EI, ea)),
    "gat-edge-attr-float": lambda x, ea, w: (sl.GATConv(F_IN, 4, edge_dim=3, fill_value=0.5), (x, EI, ea)),
    "gat-target-to-source": lambda x, ea, w: (sl.GATConv(F_IN, 4, flow="target_to_source"), (x, EI)),
    "sage": lambda x, ea, w: (sl.SAGEConv(F_IN, 6), (x, EI)),
    "sage-max-normalize": lambda x, ea, w: (sl.SAGEConv(F_IN, 6, aggr="max", normalize=True, project=True), (x, EI)),
    "sage-sum-target-to-source": lambda x, ea, w: (sl.SAGEConv(F_IN, 6, aggr="sum", flow="target_to_source"), (x, EI)),
    "gin": lambda x, ea, w: (sl.GINConv(torch.nn.Linear(F_IN, 6), train_eps=True), (x, EI)),
    "gin-mean-static-graph": lambda x, ea, w: (sl.GINConv(torch.nn.Identity(), aggr="mean"),
                                               (torch.stack([x, -x]), EI)),
}


@pytest.mark.parametrize("case", CASES)
def test_scripted_layer_equals_eager(case):
    torch.manual_seed(0)
    layer, args = CASES[case](*data())
    layer.eval()
    script = scripted(layer)
    leaves = [a.clone().requires_grad_() for a in args if a.is_floating_point()]
    out = script(*[leaves.pop(0) if a.is_floating_point() else a for a in args])
    torch.testing.assert_close(out, layer(*args), atol=1e-6, rtol=1e-6)
    assert "seastar_layers::" in str(script.graph) or "seastar_layers::" in str(script.inlined_graph)


def test_scripted_bipartite_gat():
    gen = torch.Generator().manual_seed(3)
    x_src, x_dst = torch.randn(N, F_IN, generator=gen), torch.randn(7, 5, generator=gen)
    ei = random_graph(N, 7, 40, seed=5)
    layer = sl.GATConv((F_IN, 5), 3, heads=2).eval()
    torch.testing.assert_close(scripted(layer)((x_src, x_dst), ei, size=(N, 7)), layer((x_src, x_dst), ei, size=(N, 7)))


def test_scripted_bipartite_sage_and_gin():
    """A pair of features with sizes, with destination features and without (no root term)."""
    gen = torch.Generator().manual_seed(3)
    x_src, x_dst = torch.randn(N, F_IN, generator=gen), torch.randn(7, F_IN, generator=gen)
    ei = random_graph(N, 7, 40, seed=5)
    for layer in (sl.SAGEConv(F_IN, 3).eval(), sl.SAGEConv(F_IN, 3, aggr="max").eval(),
                  sl.GINConv(torch.nn.Linear(F_IN, 3)).eval()):
        for pair in ((x_src, x_dst), (x_src, None)):
            torch.testing.assert_close(scripted(layer)(pair, ei, size=(N, 7)), layer(pair, ei, size=(N, 7)))
    reversed_flow = scripted(sl.SAGEConv(F_IN, 3, flow="target_to_source"))
    with pytest.raises(Exception, match="a pair of features with flow='target_to_source' runs PyG's own layer"):
        reversed_flow((x_src, x_dst), ei.flip(0), size=(7, N))


def test_scripted_training_mode_runs_dropout():
    layer = sl.GATConv(F_IN, 4, heads=2, dropout=0.5).train()
    out = scripted(layer)(data()[0], EI)
    out.sum().backward()
    assert layer.lin.weight.grad is not None and torch.isfinite(layer.lin.weight.grad).all()


@pytest.mark.parametrize("make,option", [
    (lambda: sl.GCNConv(F_IN, 4, aggr="max"), "aggr='max'"),
    (lambda: sl.APPNP(K=2, alpha=0.1, aggr="mean"), "aggr='mean'"),
    (lambda: sl.SAGEConv(F_IN, 4, aggr="std"), "aggr='std'"),
])
def test_options_that_cannot_be_scripted_are_named(make, option):
    with pytest.raises(RuntimeError, match=rf"seastar_layers\.\w+: {option} cannot be scripted"):
        scripted(make())


def test_explain_mode_cannot_be_scripted():
    from torch_geometric.explain.algorithm.utils import set_masks

    layer = sl.GATConv(F_IN, 4)
    set_masks(layer, torch.randn(EI.shape[1]), EI)
    with pytest.raises(RuntimeError, match="explain mode cannot be scripted"):
        scripted(layer)


def test_scripted_layer_refuses_what_it_cannot_run():
    """(TorchScript raises torch.jit.Error, carrying the message.)"""
    script = scripted(sl.GATConv(F_IN, 4))
    x = data()[0]
    with pytest.raises(Exception, match="return_attention_weights runs PyG's own GATConv"):
        script(x, EI, return_attention_weights=True)
    adjacency = torch.sparse_coo_tensor(EI, torch.ones(EI.shape[1]), (N, N))
    with pytest.raises(Exception, match="not a sparse adjacency"):
        scripted(sl.GCNConv(F_IN, 4))(x, adjacency)
    bad = EI.clone()
    bad[1, 0] = N + 3
    with pytest.raises(Exception, match="Found indices in 'edge_index'"):
        scripted(sl.GCNConv(F_IN, 4))(x, bad)


def test_saved_script_runs_in_a_fresh_process(tmp_path):
    torch.manual_seed(0)
    layer = sl.GATConv(F_IN, 4, heads=2).eval()
    x = data()[0]
    scripted(layer).save(str(tmp_path / "gat.pt"))
    torch.save({"x": x, "edge_index": EI, "out": layer(x, EI)}, tmp_path / "io.pt")
    script = textwrap.dedent(f"""
        import torch
        import seastar_layers  # defines torch.ops.seastar_layers
        module = torch.jit.load({str(tmp_path / "gat.pt")!r})
        io = torch.load({str(tmp_path / "io.pt")!r})
        torch.testing.assert_close(module(io["x"], io["edge_index"]), io["out"])
        print("scripted ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "scripted ok" in result.stdout, result.stderr[-3000:]


@pytest.mark.parametrize("name,args", [("APPNP", (10, 0.1)), ("GCNConv", (F_IN, 6))])
def test_cached_layers_script_and_keep_their_graph_as_pygs(name, args):
    """PyG's test_appnp (FULL_TEST) scripts APPNP(K=10, alpha=0.1, cached=True): the scripted module
    keeps the normalised graph of its first call, as PyG's scripted layer does, and ignores the
    graph and weights of later calls."""
    import torch_geometric.nn as pyg_nn

    torch.manual_seed(0)
    ours = getattr(sl, name)(*args, cached=True).eval()
    theirs = getattr(pyg_nn, name)(*args, cached=True).eval()
    theirs.load_state_dict(ours.state_dict())
    ours_script, theirs_script = scripted(ours), scripted(theirs)
    x, _, w = data()
    other = random_graph(N, N, 60, seed=9)
    for edge_index, weight in [(EI, None), (other, None), (other, w[:60])]:
        expected = theirs_script(x, edge_index, weight)
        got = ours_script(x, edge_index, weight)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours_script(x, other), ours_script(x, EI))  # the first graph, kept
    assert "seastar_layers::" in str(ours_script.inlined_graph)
    # the eager layer keeps its own cache, untouched by scripting
    torch.testing.assert_close(ours(x, EI), theirs(x, EI), atol=1e-5, rtol=1e-5)


def test_a_layer_with_message_passing_hooks_scripts_as_pygs():
    """PyG's test_gcn_conv_with_decomposed_layers scripts a GCNConv with a message-forward pre-hook:
    its scripted module runs no Python hook (TorchScript cannot); ours scripts the same way, and
    the eager layer still honours the hook."""
    import torch_geometric.nn as pyg_nn

    torch.manual_seed(0)
    ours = sl.GCNConv(F_IN, 6).eval()
    theirs = pyg_nn.GCNConv(F_IN, 6).eval()
    theirs.load_state_dict(ours.state_dict())
    calls = []

    def hook(module, inputs):
        calls.append(module)

    for layer in (ours, theirs):
        layer.register_message_forward_pre_hook(hook)
    x = data()[0]
    ours_script, theirs_script = scripted(ours), scripted(theirs)
    torch.testing.assert_close(ours_script(x, EI), theirs_script(x, EI), atol=1e-5, rtol=1e-5)
    assert calls == []  # neither scripted module ran the hook
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the eager layer says it runs PyG's message passing for the hook
        torch.testing.assert_close(ours(x, EI), theirs(x, EI), atol=1e-5, rtol=1e-5)
    assert calls == [ours, theirs]
