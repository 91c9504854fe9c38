"""The layers and compiled programs on a GPU (marker `gpu`): forward and gradients against the CPU
results and against PyG's (and DGL's) own layers on the same device, every option, odd widths, a
hub row and empty rows, half precision and autocast, mixed devices, the warm JIT.

Without a CUDA device every test here is skipped. With SEASTAR_GPU_DRY_RUN=1 they run on CPU
tensors through the CUDA dialect under the CPU emulator (SEASTAR_EMULATE_CUDA=1) in place of the
GPU, on smaller graphs, so the tests themselves are exercised where there is no GPU:

    SEASTAR_GPU_DRY_RUN=1 python -m pytest -q -m gpu tests/test_gpu.py

The CPU reference always runs the CPU dialect (the emulation is switched off around it).
scripts/gpu_check.sh runs this file on a GPU machine.
"""
import contextlib
import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from helpers import assert_unbiased, draws, options_id, random_graph
from test_cuda_dialect import HALF_TOLERANCE, gat, hub_graph, per_head_dot, sum_max
from test_language import CASES, N, features, weighted_sum
from test_pyg_layers import GAT_OPTIONS as PYG_GAT_OPTIONS
from test_pyg_layers import data as pyg_data

import seastar_layers as sl

DRY_RUN = os.environ.get("SEASTAR_GPU_DRY_RUN", "").strip().lower() not in ("", "0", "false", "no")
if DRY_RUN:
    DEVICE = torch.device("cpu")
elif torch.cuda.is_available():
    DEVICE = torch.device("cuda")
else:
    DEVICE = None
# graph sizes: a real GPU gets hubs of 100k in-edges; the emulator runs one thread at a time
LARGE = DEVICE is not None and DEVICE.type == "cuda"

if DEVICE is None:
    pytest.skip("no CUDA device (torch.cuda.is_available() is False): run scripts/gpu_check.sh on a GPU machine, or "
                "SEASTAR_GPU_DRY_RUN=1 to run these tests on the CPU under the CUDA emulator", allow_module_level=True)
pytestmark = pytest.mark.gpu

try:
    import test_dgl_layers as dgl_tests  # imports DGL
except ImportError as e:
    dgl_tests, DGL_MISSING = None, f"DGL is not importable ({e})"


@pytest.fixture(autouse=True)
def on_device(monkeypatch):
    """The device run: the CUDA dialect on the GPU, or under the emulator in a dry run."""
    if DRY_RUN:
        monkeypatch.setenv("SEASTAR_EMULATE_CUDA", "1")
    else:
        monkeypatch.delenv("SEASTAR_EMULATE_CUDA", raising=False)


@contextlib.contextmanager
def cpu_dialect():
    """The reference run: CPU tensors through the CPU dialect, also in a dry run."""
    saved = os.environ.pop("SEASTAR_EMULATE_CUDA", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["SEASTAR_EMULATE_CUDA"] = saved


def fresh(obj, device):
    """obj's tensors (in tuples, lists and dicts too) copied to device; floating ones become leaves
    that require grad, so each run has gradients of its own."""
    if isinstance(obj, torch.Tensor):
        copy = obj.detach().to(device)
        return copy.clone().requires_grad_() if copy.is_floating_point() else copy
    if isinstance(obj, (tuple, list)):
        return type(obj)(fresh(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: fresh(v, device) for k, v in obj.items()}
    return obj


def leaves(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj] if obj.requires_grad else []
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in leaves(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in leaves(o)]
    return []


def projection(outputs, seed: int = 3):
    """A fixed random loss over the outputs (the same numbers, rounded to each output's dtype, on
    every device)."""
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    gen = torch.Generator().manual_seed(seed)
    return sum((o * torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.device, o.dtype)).sum()
               for o in outputs)


def run(fn, args, device, module=None):
    """fn(*args) on device: the outputs, the gradients of the inputs and of module's parameters
    (all on the CPU, in float64 for comparing)."""
    args = fresh(args, device)
    if module is not None:
        module.zero_grad()
    out = fn(*args)
    loss = projection(out)
    inputs = leaves(args)
    if loss.requires_grad:
        loss.backward()
    outs = out if isinstance(out, tuple) else (out,)
    assert all(o.device.type == torch.device(device).type for o in outs), f"outputs on {[o.device for o in outs]}"

    def host(t):
        return None if t is None else t.detach().cpu().double()

    params = {} if module is None else {k: host(p.grad) for k, p in module.named_parameters()}
    return [host(o) for o in outs], [host(t.grad) for t in inputs], params


def assert_same(got, want, what: str, tol, grad_tol=None, param_tol=None) -> None:
    """Two run() results agree: outputs within tol = (atol, rtol), input gradients within grad_tol
    (default tol), parameter gradients (sums over every vertex) within param_tol (default: rtol x 10)."""
    (out_a, grads_a, params_a), (out_b, grads_b, params_b) = got, want
    grad_tol = grad_tol or tol
    param_tol = param_tol or (grad_tol[0], grad_tol[1] * 10)
    for k, (a, b) in enumerate(zip(out_a, out_b, strict=True)):
        torch.testing.assert_close(a, b, atol=tol[0], rtol=tol[1], msg=lambda m: f"{what}: output {k}: {m}")
    for k, (a, b) in enumerate(zip(grads_a, grads_b, strict=True)):
        if a is None or b is None:  # an input the outputs do not depend on: no gradient, or zeros
            assert (a is None or not a.any()) and (b is None or not b.any()), f"{what}: gradient of input {k}"
            continue
        torch.testing.assert_close(a, b, atol=grad_tol[0], rtol=grad_tol[1],
                                   msg=lambda m: f"{what}: gradient of input {k}: {m}")
    assert params_a.keys() == params_b.keys()
    for k in params_a:
        a, b = params_a[k], params_b[k]
        if a is None or b is None:
            assert a is None and b is None, f"{what}: gradient of {k}"
            continue
        torch.testing.assert_close(a, b, atol=param_tol[0], rtol=param_tol[1],
                                   msg=lambda m: f"{what}: gradient of {k}: {m}")


EXACT = (1e-9, 1e-7)  # float64 on two backends
FLOAT32 = (1e-5, 1e-5)  # float32, as test_pyg_layers compares with PyG


def against_cpu(fn, args, tol=EXACT, layer_on=None):
    """fn(layer, *args) on the device against the same on the CPU (the CPU dialect); layer_on(device)
    gives the layer fn calls there (None: no layer). Returns the device's run()."""
    results = []
    for device, context in (("cpu", cpu_dialect()), (DEVICE, contextlib.nullcontext())):
        layer = layer_on(device) if layer_on else None
        with context:
            results.append(run(lambda *a: fn(layer, *a), args, device, layer))
    want, got = results
    assert_same(got, want, "device vs CPU", tol)
    return got


# --- the language ------------------------------------------------------------------------------
@pytest.mark.parametrize("fn,names", CASES, ids=[c[0].__name__ for c in CASES])
@pytest.mark.parametrize("n_src,n_dst,n_edges", [(N, N, 80), (N, 9, 60)], ids=["square", "bipartite"])
def test_language_on_device_matches_cpu(fn, names, n_src, n_dst, n_edges):
    ei = random_graph(n_src, n_dst, n_edges, seed=1)
    feats = features(torch.float64, n_src, n_dst, ei.shape[1])
    prog = sl.compile(fn)
    against_cpu(lambda _, ei, f: prog(ei, size=(n_src, n_dst), **f), (ei, {k: feats[k] for k in names}))


@pytest.mark.parametrize("width", [1, 7, 48, 300])
@pytest.mark.parametrize("fn", [gat, sum_max, per_head_dot], ids=lambda f: f.__name__)
@pytest.mark.parametrize("generic", [False, True], ids=["exact", "generic"])
def test_odd_widths_hub_and_empty_rows(fn, width, generic):
    """hub_graph: vertex 0 has 4n in-edges (100k on a GPU), some rows none."""
    n = 25_000 if LARGE else 40
    ei = hub_graph(n, seed=width)
    gen = torch.Generator().manual_seed(width)
    heads = 3 if width != 300 else 1

    def r(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    feats = {"el": r(n, heads, 1), "er": r(n, heads, 1), "h": r(n, heads, width), "g": r(n, heads, width)}
    used = {k: feats[k] for k in ({"gat": ("el", "er", "h")}.get(fn.__name__, ("h", "g")))}
    prog = sl.compile(fn, generic_shapes=generic)
    against_cpu(lambda _, ei, f: prog(ei, **f), (ei, used))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_programs_in_half_precision(dtype):
    """Half features accumulate in float32 and come out in their dtype: against the CPU run in
    float64 on the same (rounded) inputs."""
    n = 2000 if LARGE else 30
    ei = hub_graph(n, seed=5)
    gen = torch.Generator().manual_seed(5)
    feats = {"el": torch.randn(n, 2, 1, generator=gen), "er": torch.randn(n, 2, 1, generator=gen),
             "h": torch.randn(n, 2, 7, generator=gen)}
    half = {k: v.to(dtype) for k, v in feats.items()}
    prog = sl.compile(gat)
    on_device = fresh(half, DEVICE)
    out = prog(ei.to(DEVICE), **on_device)
    assert out.dtype == dtype and out.device.type == DEVICE.type
    assert all(t.dtype == dtype for t in torch.autograd.grad(projection(out), list(on_device.values())))
    with cpu_dialect():
        want = run(lambda ei, f: prog(ei, **f), (ei, {k: v.double() for k, v in half.items()}), "cpu")
    got = run(lambda ei, f: prog(ei, **f), (ei, half), DEVICE)
    tol = HALF_TOLERANCE[dtype]
    assert_same(got, want, f"{dtype} on the device vs float64 on the CPU", (tol, tol), (tol * 4, tol * 4))


# --- the PyG layers ----------------------------------------------------------------------------
def layer_pair(library, drop_ins, name: str, **kwargs):
    """(the library's layer `name` on the CPU, a constructor of our drop-in on a device): the same
    weights, eval mode."""
    torch.manual_seed(0)
    ref = getattr(library, name)(**kwargs).eval()
    state = ref.state_dict()

    def ours(device):
        layer = getattr(drop_ins, name)(**kwargs)
        layer.load_state_dict(state, strict=True)
        return layer.eval().to(device)

    return ref, ours


def pyg_layers(name: str, **kwargs):
    return layer_pair(pyg_nn, sl, name, **kwargs)


def layer_parity(ref, make_ours, args, kwargs=None, tol=FLOAT32):
    """Ours on the device against ours on the CPU and against PyG's layer on the device: outputs
    and gradients of the inputs (edge weights and features included) and of every parameter."""
    kwargs = kwargs or {}
    got = against_cpu(lambda layer, *a: layer(*a, **kwargs), args, tol, layer_on=make_ours)
    ref = ref.to(DEVICE)
    theirs = run(lambda *a: ref(*a, **kwargs), args, DEVICE, ref)
    assert_same(got, theirs, f"ours vs PyG's {type(ref).__name__} on {DEVICE}", tol)


GAT_OPTIONS = PYG_GAT_OPTIONS + [dict(heads=2, dropout=0.5), dict(heads=2, flow="target_to_source")]


@pytest.mark.parametrize("options", GAT_OPTIONS, ids=options_id)
def test_pyg_gat(options):
    ref, ours = pyg_layers("GATConv", in_channels=12, out_channels=5, **options)
    x, ei = pyg_data()
    args = (x, ei, torch.randn(ei.shape[1], 3)) if "edge_dim" in options else (x, ei)
    layer_parity(ref, ours, args)


def test_pyg_gat_bipartite_and_size():
    ref, ours = pyg_layers("GATConv", in_channels=(12, 7), out_channels=4, heads=2, add_self_loops=False)
    gen = torch.Generator().manual_seed(1)
    pair = (torch.randn(17, 12, generator=gen), torch.randn(9, 7, generator=gen))
    ei = random_graph(17, 9, 50, seed=4)
    layer_parity(ref, ours, (pair, ei))
    layer_parity(ref, ours, (pair, ei), dict(size=(17, 9)))


GCN_OPTIONS = [dict(), dict(improved=True), dict(add_self_loops=False), dict(normalize=False), dict(bias=False),
               dict(cached=True), dict(flow="target_to_source")]
APPNP_OPTIONS = [dict(K=1, alpha=0.1), dict(K=5, alpha=0.3), dict(K=3, alpha=0.1, add_self_loops=False),
                 dict(K=2, alpha=0.2, normalize=False), dict(K=2, alpha=0.1, cached=True),
                 dict(K=2, alpha=0.1, dropout=0.5)]


@pytest.mark.parametrize("options", GCN_OPTIONS, ids=options_id)
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "edge_weight"])
def test_pyg_gcn(options, weighted):
    ref, ours = pyg_layers("GCNConv", in_channels=12, out_channels=6, **options)
    x, ei = pyg_data()
    layer_parity(ref, ours, (x, ei, torch.rand(ei.shape[1])) if weighted else (x, ei))


@pytest.mark.parametrize("options", APPNP_OPTIONS, ids=options_id)
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "edge_weight"])
def test_pyg_appnp(options, weighted):
    ref, ours = pyg_layers("APPNP", **options)
    x, ei = pyg_data()
    layer_parity(ref, ours, (x, ei, torch.rand(ei.shape[1])) if weighted else (x, ei))


@pytest.mark.parametrize("name,kwargs", [("GCNConv", dict(in_channels=12, out_channels=6)),
                                         ("APPNP", dict(K=2, alpha=0.1))])
def test_pyg_static_graph_features(name, kwargs):
    """(B, N, F) features over one graph."""
    ref, ours = pyg_layers(name, **kwargs)
    layer_parity(ref, ours, (torch.randn(3, 29, 12, generator=torch.Generator().manual_seed(2)), pyg_data()[1]))


@pytest.mark.parametrize("name,kwargs", [("GATConv", dict(in_channels=12, out_channels=4, heads=2)),
                                         ("GCNConv", dict(in_channels=12, out_channels=6)),
                                         ("APPNP", dict(K=2, alpha=0.1))])
def test_pyg_explain_mask(name, kwargs):
    """An explainer's edge mask on the device (as PyG's explainers set it) scales each message;
    its gradient is compared too."""
    from torch_geometric.explain.algorithm.utils import set_masks

    ref, ours = pyg_layers(name, **kwargs)
    x, ei = pyg_data()
    mask = torch.randn(ei.shape[1], generator=torch.Generator().manual_seed(4))

    def explained(layer, x, ei, mask):
        set_masks(layer, mask, ei, apply_sigmoid=True)
        return layer(x, ei)

    got = against_cpu(explained, (x, ei, mask), FLOAT32, layer_on=ours)
    theirs = run(lambda *a: explained(ref.to(DEVICE), *a), (x, ei, mask), DEVICE, ref)
    assert_same(got, theirs, f"ours vs PyG's {name} on {DEVICE}", FLOAT32)


def large_graph():
    """Random edges, empty rows and a hub: 20k vertices and a 50k-edge hub on a GPU."""
    n = 20_000 if LARGE else 60
    gen = torch.Generator().manual_seed(11)
    hub = torch.stack([torch.randint(0, n, (n * 5 // 2,), generator=gen), torch.zeros(n * 5 // 2, dtype=torch.long)])
    return torch.randn(n, 12, generator=gen), torch.cat([random_graph(n, n, 10 * n, seed=11), hub], dim=1)


@pytest.mark.parametrize("name,kwargs", [("GATConv", dict(in_channels=12, out_channels=8, heads=8)),
                                         ("GCNConv", dict(in_channels=12, out_channels=48)),
                                         ("APPNP", dict(K=3, alpha=0.1))])
def test_pyg_layers_on_a_larger_graph_with_a_hub(name, kwargs):
    ref, ours = pyg_layers(name, **kwargs)
    layer_parity(ref, ours, large_graph(), tol=(1e-4, 1e-4))


@pytest.mark.parametrize("width", [1, 7, 48, 300])
def test_pyg_gat_odd_widths(width):
    heads = 3 if width != 300 else 1
    ref, ours = pyg_layers("GATConv", in_channels=12, out_channels=width, heads=heads)
    layer_parity(ref, ours, pyg_data(), tol=(1e-4, 1e-4))


# --- dropout in training: seeded, and statistically as the library's -------------------------
DRAWS = 200 if LARGE else 40


@pytest.mark.parametrize("name,kwargs", [("GATConv", dict(in_channels=12, out_channels=4, heads=2, dropout=0.4)),
                                         ("APPNP", dict(K=3, alpha=0.1, dropout=0.4))])
def test_pyg_dropout_in_training(name, kwargs):
    """Seeded: the same seed gives the same output and gradients. Unbiased: the mean of many draws
    tends to the eval output. GAT's attention dropout spreads outputs as much as PyG's does (APPNP's
    differs from PyG 2.8 on purpose: docs/design.md)."""
    ref, ours = pyg_layers(name, **kwargs)
    x, ei = pyg_data()
    layer = ours(DEVICE)
    args = fresh((x, ei), DEVICE)
    expected = layer(*args).detach()
    layer.train()
    seeded = []
    for _ in range(2):
        torch.manual_seed(7)
        seeded.append(run(layer, (x, ei), DEVICE, layer))
    assert_same(seeded[0], seeded[1], "the same seed twice", FLOAT32)  # other masks would differ by far more
    ours_draws = draws(layer, args, DRAWS)
    assert_unbiased(ours_draws, expected, f"seastar {name}")
    if name == "GATConv":
        theirs = draws(ref.to(DEVICE).train(), args, DRAWS, seed=1)
        assert_unbiased(theirs, expected, f"PyG's {name}")
        ratio = float(ours_draws.var(0).sum() / theirs.var(0).sum())
        assert 0.75 < ratio < 1.33, f"ours spreads {ratio:.2f} times as much as PyG's (variance)"


# --- the DGL layers ----------------------------------------------------------------------------
@pytest.fixture
def dgl_device():
    """DGL where it is importable and can put graphs on the device; else the test is skipped."""
    if dgl_tests is None:
        pytest.skip(f"{DGL_MISSING}: the DGL drop-ins are not tested on this machine")
    dgl = dgl_tests.dgl
    try:
        dgl.graph(([0], [0])).to(DEVICE)
    except (dgl.DGLError, RuntimeError) as e:
        pytest.skip(f"this DGL cannot put graphs on {DEVICE} (a CPU-only build): {e}")
    return dgl


def dgl_layers(name: str, **kwargs):
    import seastar_layers.dgl as sd  # imports DGL

    return layer_pair(dgl_tests.dgl.nn, sd, name, **kwargs)


def dgl_parity(ref, make_ours, g, feat, edge_weight=None):
    """As layer_parity, for DGL's layers, which take the graph first: it is moved to each device."""
    graphs = {"cpu": g, DEVICE.type: g.to(DEVICE)}

    def call(layer, feat, *edge_weight):  # a keyword: GraphConv takes an external weight before it
        graph = graphs[(feat[0] if isinstance(feat, tuple) else feat).device.type]
        return layer(graph, feat, **({"edge_weight": edge_weight[0]} if edge_weight else {}))

    args = (feat,) if edge_weight is None else (feat, edge_weight)
    got = against_cpu(call, args, FLOAT32, layer_on=make_ours)
    ref = ref.to(DEVICE)
    theirs = run(lambda *a: call(ref, *a), args, DEVICE, ref)
    assert_same(got, theirs, f"ours vs DGL's {type(ref).__name__} on {DEVICE}", FLOAT32)


def dgl_case(name):
    return getattr(dgl_tests, name) if dgl_tests is not None else [None]


@pytest.mark.parametrize("options", dgl_case("GAT_OPTIONS"), ids=options_id)
def test_dgl_gat(dgl_device, options):
    ref, ours = dgl_layers("GATConv", in_feats=dgl_tests.F_IN, out_feats=4, **options)
    g = dgl_tests.graph()
    dgl_parity(ref, ours, g, dgl_tests.x())
    dgl_parity(ref, ours, g, dgl_tests.x(), torch.rand(g.num_edges()))


def test_dgl_gat_bipartite(dgl_device):
    dgl = dgl_device
    ref, ours = dgl_layers("GATConv", in_feats=(dgl_tests.F_IN, 6), out_feats=3, num_heads=2, allow_zero_in_degree=True)
    gen = torch.Generator().manual_seed(2)
    g = dgl.heterograph({("a", "r", "b"): (torch.randint(0, 15, (40,), generator=gen),
                                           torch.randint(0, 9, (40,), generator=gen))}, {"a": 15, "b": 9})
    dgl_parity(ref, ours, g, (dgl_tests.x(15, dgl_tests.F_IN), dgl_tests.x(9, 6)))


@pytest.mark.parametrize("name,kwargs", [("GATConv", dict(out_feats=3, num_heads=2)), ("GraphConv", dict(out_feats=3))])
def test_dgl_sampled_blocks(dgl_device, name, kwargs):
    ref, ours = dgl_layers(name, in_feats=dgl_tests.F_IN, allow_zero_in_degree=True, **kwargs)
    for block in dgl_tests.sampled_blocks():
        dgl_parity(ref, ours, block, dgl_tests.x(block.num_src_nodes(), dgl_tests.F_IN))


@pytest.mark.parametrize("norm", ["both", "left", "right", "none"])
def test_dgl_graphconv(dgl_device, norm):
    ref, ours = dgl_layers("GraphConv", in_feats=dgl_tests.F_IN, out_feats=6, norm=norm)
    g = dgl_tests.graph()
    dgl_parity(ref, ours, g, dgl_tests.x())
    dgl_parity(ref, ours, g, dgl_tests.x(), torch.rand(g.num_edges()))


@pytest.mark.parametrize("options", [dict(k=1, alpha=0.1), dict(k=4, alpha=0.3)], ids=options_id)
def test_dgl_appnp(dgl_device, options):
    ref, ours = dgl_layers("APPNPConv", **options)
    g = dgl_tests.graph()
    dgl_parity(ref, ours, g, dgl_tests.x())
    dgl_parity(ref, ours, g, dgl_tests.x(), torch.rand(g.num_edges()))


@pytest.mark.parametrize("name,kwargs", [("GATConv", dict(in_feats=10, out_feats=4, num_heads=2, attn_drop=0.4)),
                                         ("APPNPConv", dict(k=3, alpha=0.1, edge_drop=0.4))])
def test_dgl_dropout_in_training(dgl_device, name, kwargs):
    _, ours = dgl_layers(name, **kwargs)
    layer = ours(DEVICE)
    args = (dgl_tests.graph().to(DEVICE), dgl_tests.x().to(DEVICE))
    expected = layer(*args).detach()
    layer.train()
    assert_unbiased(draws(layer, args, DRAWS), expected, f"seastar dgl.{name}")


# --- half precision and autocast ----------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name,kwargs", [("GATConv", dict(in_channels=12, out_channels=4, heads=2)),
                                         ("GCNConv", dict(in_channels=12, out_channels=6)),
                                         ("APPNP", dict(K=2, alpha=0.1))])
def test_pyg_layers_in_half_precision(name, kwargs, dtype):
    """A layer converted to half precision takes half features and gives half outputs, close to
    PyG's layer in float32 on the same (rounded) weights and inputs."""
    _, ours = pyg_layers(name, **kwargs)
    layer = ours(DEVICE).to(dtype)
    reference = getattr(pyg_nn, name)(**kwargs).eval().to(DEVICE)
    reference.load_state_dict({k: v.float() for k, v in layer.state_dict().items()})
    x, ei = pyg_data()
    half = x.to(dtype)
    assert layer(*fresh((half, ei), DEVICE)).dtype == dtype
    got = run(layer, (half, ei), DEVICE, layer)
    want = run(reference, (half.float(), ei), DEVICE, reference)
    tol = HALF_TOLERANCE[dtype]
    assert_same(got, want, f"{name} in {dtype} vs PyG's in float32", (tol, tol), (tol * 4, tol * 4))


class Net(torch.nn.Module):
    """GAT, then GCN, then APPNP: a small classifier of either library's layers."""

    def __init__(self, nn):
        super().__init__()
        self.gat = nn.GATConv(12, 8, heads=4)
        self.gcn = nn.GCNConv(32, 5)
        self.appnp = nn.APPNP(K=3, alpha=0.1)

    def forward(self, x, ei):
        return self.appnp(self.gcn(F.elu(self.gat(x, ei)), ei), ei)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_autocast_training_step(dtype):
    """A model trained under torch.autocast does not crash on our layers: each layer gives its
    input's dtype, as PyG's layers do under autocast, and the loss and gradients are PyG's within
    half-precision tolerance."""
    x, ei = fresh(pyg_data(), DEVICE)
    y = torch.arange(x.shape[0], device=DEVICE) % 5
    ref_model = Net(pyg_nn)
    results = {}
    for lib, nn in (("ours", sl), ("PyG", pyg_nn)):
        model = Net(nn)
        model.load_state_dict(ref_model.state_dict())
        model.to(DEVICE)
        optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
        dtypes = []
        for layer in (model.gat, model.gcn, model.appnp):
            layer.register_forward_hook(lambda m, inputs, out: dtypes.append((inputs[0].dtype, out.dtype)))
        with torch.autocast(DEVICE.type, dtype=dtype):
            out = model(x, ei)
            loss = F.cross_entropy(out, y)
        loss.backward()
        grads = {k: p.grad.detach().clone() for k, p in model.named_parameters()}
        optimiser.step()
        results[lib] = (loss.detach(), dtypes, grads)
    (loss, dtypes, grads), (ref_loss, ref_dtypes, ref_grads) = results["ours"], results["PyG"]
    assert dtypes == ref_dtypes, f"layer (input, output) dtypes: ours {dtypes}, PyG's {ref_dtypes}"
    assert all(i == o for i, o in dtypes), f"a layer's output dtype differs from its input's: {dtypes}"
    tol = HALF_TOLERANCE[dtype]
    torch.testing.assert_close(loss.float(), ref_loss.float(), atol=tol, rtol=tol)
    for k in ref_grads:
        assert torch.isfinite(grads[k]).all(), k
        assert grads[k].dtype == ref_grads[k].dtype
        torch.testing.assert_close(grads[k].float(), ref_grads[k].float(), atol=tol * 4, rtol=tol * 4, msg=k)


# --- mixed devices ------------------------------------------------------------------------------
def graph_elsewhere(ei: torch.Tensor, n: int):
    """The graph on another device than the features: the CPU for a GPU run; in a dry run, where
    there is no second device, an sl.Graph on the meta device stands in for one."""
    if DEVICE.type == "cuda":
        return ei
    g = sl.Graph.from_edge_index(ei, n)
    return sl.Graph._from_checked([t.to("meta") for t in g.tensors()], g.num_src, g.num_dst)


def test_mixed_devices_raise_a_clear_error():
    ei = random_graph(N, N, 50, seed=3)
    feats = fresh({k: v for k, v in features(torch.float32).items() if k in ("h", "norm")}, DEVICE)
    graph = graph_elsewhere(ei, N)
    with pytest.raises(ValueError, match=r"the graph \(.*\) is on (cpu|meta) but the features are on .*move the graph"):
        sl.compile(weighted_sum)(graph, **feats)


@pytest.mark.parametrize("name,kwargs", [("GATConv", dict(in_channels=12, out_channels=3, heads=2)),
                                         ("GCNConv", dict(in_channels=12, out_channels=3)),
                                         ("APPNP", dict(K=2, alpha=0.1))])
def test_layers_refuse_an_edge_index_on_another_device(name, kwargs):
    """The error names the graph (edge_index) and both devices, not the layer's internal tensors."""
    if DEVICE.type != "cuda":
        pytest.skip("dry run: an edge_index has no second device to be on without a GPU")
    _, ours = pyg_layers(name, **kwargs)
    x, ei = pyg_data()
    with pytest.raises(ValueError, match=r"(?s)(graph|edge_index).*(cpu.*cuda|cuda.*cpu)"):
        ours(DEVICE)(x.to(DEVICE), ei)


def test_features_on_two_gpus_raise_a_clear_error():
    if DEVICE.type != "cuda" or torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    ei = random_graph(N, N, 50, seed=3).to("cuda:0")
    feats = features(torch.float32)
    with pytest.raises(ValueError, match=r"'h' on cuda:0, 'norm' on cuda:1"):
        sl.compile(weighted_sum)(
            ei, h=feats["h"].to("cuda:0"), norm=feats["norm"].to("cuda:1"))


# --- the warm JIT ------------------------------------------------------------------------------
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import warm_jit  # noqa: E402  (shared with bench_gpu.py, which times the hit against its target)


def test_warm_jit_hit_in_a_fresh_process(tmp_path):
    """A fresh process finds the program's kernels in the disk cache: it builds nothing and computes
    what the process that built them computed. The hit's time is measured by bench_gpu.py."""
    cold, warm = warm_jit.fresh_processes(tmp_path, DEVICE.type)
    assert cold["builds"] == 1, "the first process found the kernel already built: its cache was not empty"
    for report in warm:
        assert report["builds"] == 0, "the fresh process compiled the kernel again: the disk cache missed"
        assert report["checksum"] == cold["checksum"] and report["same_twice"], (cold, report)
    print(f"warm JIT hit in a fresh process: {warm_jit.hit_seconds(warm_jit.fastest(warm)) * 1e3:.1f} ms (not judged here: "
          "bench_gpu.py times it)")
