"""The layers run from the kernels compiled at install time (on the CPU: float32, without attention
weights or masks, nn/programs.py: is_prebuilt): no compiler is needed, or allowed. What the install
leaves to first use needs the compiler and says so."""
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import torch, torch_geometric.nn as P
    import seastar_layers as sl
    from seastar_layers.errors import BuildError
    from seastar_layers.runtime import jit, prebuilt
    assert prebuilt.library() is not None, "seastar_layers._C is not installed"
    from seastar_layers.nn.programs import PREBUILT_DTYPES
    assert PREBUILT_DTYPES["cpu"] == (torch.float32,), PREBUILT_DTYPES
    x, ei = torch.randn(40, 12), torch.randint(0, 40, (2, 160))
    checks = [(sl.GATConv(12, 5, heads=3, edge_dim=2), P.GATConv(12, 5, heads=3, edge_dim=2), (x, ei, torch.randn(160, 2))),
              (sl.GATConv(12, 7, heads=1, concat=False), P.GATConv(12, 7, heads=1, concat=False), (x, ei)),
              (sl.GCNConv(12, 4), P.GCNConv(12, 4), (x, ei)),
              (sl.APPNP(K=3, alpha=0.1), P.APPNP(K=3, alpha=0.1), (x, ei, torch.rand(160)))]
    for ours, ref, args in checks:
        ours.load_state_dict(ref.state_dict())
        for dtype in PREBUILT_DTYPES["cpu"]:
            ours.to(dtype); ref.to(dtype)
            a = [t.to(dtype).requires_grad_() if t.is_floating_point() else t for t in args]
            out = ours(*a)
            out.sum().backward()
            torch.testing.assert_close(out, ref(*a), atol=1e-5, rtol=1e-5)
    ours.train()
    sl.GATConv(12, 4, heads=2, dropout=0.5).train()(x, ei).sum().backward()
    def refused(call, variant):  # what the install leaves to first use needs the compiler, and says so
        try:
            call()
        except RuntimeError as e:
            assert variant in str(e) and "SEASTAR_NO_JIT=1" in str(e), e
        else:
            raise AssertionError(f"{variant} compiled with SEASTAR_NO_JIT=1")

    refused(lambda: sl.GATConv(12, 5, heads=2)(x, ei, return_attention_weights=True), "with_attention")
    refused(lambda: sl.GATConv(12, 5, heads=2).double()(x.double(), ei, return_attention_weights=True), "float64")
    xb = torch.randn(3, 40, 12)  # static graphs and the reversed flow reuse the same kernels
    for ours, ref in [(sl.GCNConv(12, 4, flow="target_to_source"), P.GCNConv(12, 4, flow="target_to_source")),
                      (sl.APPNP(K=2, alpha=0.1), P.APPNP(K=2, alpha=0.1))]:
        ours.load_state_dict(ref.state_dict())
        torch.testing.assert_close(ours(xb, ei), ref(xb, ei), atol=1e-5, rtol=1e-5)

    from seastar_layers.compat import import_dgl
    dgl = import_dgl()
    import seastar_layers.dgl as sd
    g = dgl.add_self_loop(dgl.graph((ei[0], ei[1]), num_nodes=40))
    for ours, ref in [(sd.GATConv(12, 3, 4), dgl.nn.GATConv(12, 3, 4)), (sd.GraphConv(12, 6), dgl.nn.GraphConv(12, 6)),
                      (sd.APPNPConv(3, 0.1), dgl.nn.APPNPConv(3, 0.1))]:
        ours.load_state_dict(ref.state_dict())
        torch.testing.assert_close(ours(g, x), ref(g, x), atol=1e-5, rtol=1e-5)
        w = torch.rand(g.num_edges())
        if isinstance(ours, sd.GATConv):  # edge weights in GAT's softmax: a mask
            refused(lambda: ours(g, x, edge_weight=w), "mask")
        else:
            torch.testing.assert_close(ours(g, x, edge_weight=w), ref(g, x, edge_weight=w), atol=1e-5, rtol=1e-5)
        wide = torch.randn(40, 3, 12)  # (N, *, D) features fold into the heads or channels
        torch.testing.assert_close(ours(g, wide), ref(g, wide), atol=1e-5, rtol=1e-5)
    sd.GATConv(12, 3, 4, attn_drop=0.5).train()(g, x).sum().backward()
    refused(lambda: sd.GATConv(12, 3, 4)(g, x, get_attention=True), "with_attention")
    assert jit.build_count == 0

    @sl.compile
    def custom(v):
        return sum(nb.x * 2 for nb in v.innbs)
    try:
        custom(ei, x=x)
    except BuildError as e:
        assert "SEASTAR_NO_JIT=1" in str(e), e
        print("custom refused:", str(e).splitlines()[0][:80])
    else:
        raise AssertionError("a custom program compiled with SEASTAR_NO_JIT=1")
    print("prebuilt ok")
""")


def test_layers_run_without_a_compiler(tmp_path):
    env = dict(os.environ, SEASTAR_NO_JIT="1", SEASTAR_CACHE_DIR=str(tmp_path / "cache"), CXX="/nonexistent/c++")
    script = tmp_path / "run_layers.py"  # a file: vertex programs are read from their source
    script.write_text(SCRIPT)
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert "prebuilt ok" in result.stdout
    assert not list(tmp_path.glob("cache/*.so"))
