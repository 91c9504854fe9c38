"""The compiled op as torch sees it (gradcheck, opcheck, torch.compile), the kernel cache, stability."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import random_graph
from test_language import edge_features, gat_zip, max_min, mean_agg

import seastar_layers as sl
from seastar_layers import compiler
from seastar_layers.codegen import cpu
from seastar_layers.compiler import PIPELINE
from seastar_layers.errors import BuildError
from seastar_layers.ir import Role, Space
from seastar_layers.runtime import jit

N = 12
EI = random_graph(N, N, 40, seed=11)


def double(*shape, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).requires_grad_()


GAT_INPUTS = {"el": double(N, 2, 1, seed=1), "er": double(N, 2, 1, seed=2), "h": double(N, 2, 3, seed=3)}


def with_param(v):
    return sum(torch.sigmoid(e.w * PARAM) * e.src.x for e in v.inedges) + v.y * PARAM


PARAM = torch.randn(1, 4, dtype=torch.float64, requires_grad=True)


@pytest.mark.parametrize("fn,inputs", [
    (gat_zip, GAT_INPUTS),
    (max_min, {"x": double(N, 4, seed=4), "y": double(N, 4, seed=5)}),
    (mean_agg, {"x": double(N, 3, seed=6)}),
    (edge_features, {"x": double(N, 4, seed=7), "y": double(N, 4, seed=8), "w": double(EI.shape[1], 4, seed=9)}),
    (with_param, {"x": double(N, 4, seed=7), "y": double(N, 4, seed=8), "w": double(EI.shape[1], 4, seed=9)}),
], ids=["gat", "max_min", "mean", "edge_features", "param"])
def test_gradcheck_float64(fn, inputs):
    prog = sl.compile(fn)
    names = list(inputs)
    extra = [PARAM] if fn is with_param else []

    def call(*tensors):
        return prog(EI, **dict(zip(names, tensors[:len(names)])))

    assert torch.autograd.gradcheck(call, tuple(inputs.values()) + tuple(extra))


def test_a_call_autograd_does_not_record_runs_a_forward_with_no_backward():
    """Under no_grad, or with no input requiring grad, a program computes and keeps only its results
    (its specialisation has no backward and saves nothing); a closed-over parameter that requires grad
    makes autograd record the call, so that one runs the forward with a backward; for_backward=False
    fixes the first, and a call that needs a backward then says so."""
    feats = {name: t.detach() for name, t in {"x": double(N, 4, seed=7), "y": double(N, 4, seed=8),
                                               "w": double(EI.shape[1], 4, seed=9)}.items()}
    prog = sl.compile(with_param)
    with torch.no_grad():
        spec, _, _ = prog.prepare(EI, **feats)
    assert spec.op.backward is None and spec.op.saved == []
    spec, _, _ = prog.prepare(EI, **feats)  # PARAM requires grad
    assert spec.op.backward is not None
    out = prog(EI, **feats)
    assert torch.isfinite(torch.autograd.grad(out.sum(), PARAM)[0]).all()
    with torch.no_grad():
        torch.testing.assert_close(prog(EI, **feats), out)
    inference = sl.compile(gat_zip, for_backward=False)
    with torch.no_grad():
        torch.testing.assert_close(inference(EI, **GAT_INPUTS), sl.compile(gat_zip)(EI, **GAT_INPUTS))
    with pytest.raises(ValueError, match="compiled with for_backward=False, which generates no backward"):
        inference(EI, **GAT_INPUTS)


def plain_sum(v):
    return sum(e.src.x for e in v.inedges)


def test_a_compiled_programs_backward_keeps_only_the_inputs_it_reads():
    """A program whose backward does not read an input (a plain sum reads none) keeps it as its shape
    alone: it is not saved, an in-place edit after the forward is harmless, and the gradient is the
    plain-PyTorch sum's."""
    prog = sl.compile(plain_sum)
    x = double(N, 3, seed=12)
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        out = prog(EI, x=x)
    assert all(t.untyped_storage().data_ptr() != x.untyped_storage().data_ptr() for t in packed)
    reference = x.detach().clone().requires_grad_()
    want = torch.zeros(N, 3, dtype=torch.float64).index_add(0, EI[1], reference[EI[0]])
    grad = torch.randn_like(want)
    with torch.no_grad():
        x.mul_(2)
    torch.testing.assert_close(torch.autograd.grad(out, x, grad)[0], torch.autograd.grad(want, reference, grad)[0])


def test_forward_mode_ad_is_refused_by_name():
    """A dual tensor of forward-mode AD (torch.autograd.forward_ad): compiled programs have no
    forward-mode derivative, so a dual feature is refused by name (NotImplementedError), never run
    with its tangent dropped; outside a dual level the same program runs."""
    prog = sl.compile(plain_sum)
    x = double(N, 3, seed=13)
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(x, torch.ones_like(x))
        with pytest.raises(NotImplementedError, match="feature 'x' is a dual tensor"):
            prog(EI, x=dual)
    torch.testing.assert_close(prog(EI, x=x), torch.zeros(N, 3, dtype=torch.float64).index_add(0, EI[1], x[EI[0]]))


def test_opcheck():
    spec, graph, inputs = sl.compile(gat_zip).prepare(EI, **GAT_INPUTS)
    torch.library.opcheck(spec.op.forward, (graph, inputs))


def test_torch_compile():
    prog = sl.compile(gat_zip)
    graph = sl.Graph.from_edge_index(EI, N)  # built outside: its index checks are data-dependent

    def model(el, er, h):
        return prog(graph, el=el, er=er, h=h).relu().sum()

    # specialisation is opaque to dynamo (a graph break); the custom op itself is traced with its fake kernel
    compiled = torch.compile(model, backend="aot_eager")
    args = [t.detach().clone().requires_grad_() for t in GAT_INPUTS.values()]
    out = compiled(*args)
    out.backward()
    ref_args = [t.detach().clone().requires_grad_() for t in GAT_INPUTS.values()]
    model(*ref_args).backward()
    for a, b in zip(args, ref_args):
        torch.testing.assert_close(a.grad, b.grad)


def test_softmax_is_stable_in_float32():
    el = torch.randn(N, 2, 1) * 60 + 100  # exp(160) overflows float32
    er = torch.randn(N, 2, 1) * 60 + 100
    h = torch.randn(N, 2, 3)
    out = sl.compile(gat_zip)(EI, el=el, er=er, h=h)
    assert torch.isfinite(out).all()
    src, dst = EI
    s = F.leaky_relu(el[src] + er[dst], 0.2).double()
    alpha = torch.zeros(len(src), 2, 1, dtype=torch.float64)
    for i in range(N):
        mask = dst == i
        alpha[mask] = torch.softmax(s[mask], dim=0)
    expected = torch.zeros(N, 2, 3, dtype=torch.float64).index_add(0, dst, alpha * h[src].double())
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5)


def test_softmax_saves_only_row_statistics():
    # the forward that serves calls with and without a backward (a call under no_grad saves nothing)
    spec = sl.compile(gat_zip).specialise(GAT_INPUTS, as_compiled=True)
    saved = spec.op.saved
    assert len(saved) == 2  # the row max and the row sum, (N, H, 1) each; edge values are recomputed
    assert all(b.role is Role.SAVED and b.rows is Space.DST and b.shape == (2, 1) for b in saved)


def test_a_call_that_autograd_records_runs_the_forward_that_sums_for_its_backward():
    """Where a backward follows, the forward also sums what the backward would sweep the
    destinations' edges for (d er's sums, passes/precompute.py) and saves them, rows only; the
    results are the same bits as the forward's without them."""
    prog = sl.compile(gat_zip)
    with torch.no_grad():
        plain, _, _ = prog.prepare(EI, **GAT_INPUTS)
        plain_out = prog(EI, **GAT_INPUTS)
    recorded, _, _ = prog.prepare(EI, **GAT_INPUTS)
    assert recorded.op is not plain.op
    assert len(recorded.op.saved) > len(plain.op.saved)
    assert all(b.rows is Space.DST for b in recorded.op.saved)
    assert torch.equal(prog(EI, **GAT_INPUTS), plain_out)
    detached = {n: t.detach() for n, t in GAT_INPUTS.items()}  # nothing to record: the plain forward
    assert prog.prepare(EI, **detached)[0].op is plain.op


def test_edge_batches_give_the_bits_of_one_edge_at_a_time(monkeypatch):
    """A whole-row edge loop takes its edges in batches (codegen/cpu.py: EDGE_BATCH), each edge's
    per-head values first, then its accumulators. Each accumulator still adds its edges in order,
    so results and gradients are the bits of one edge at a time, on rows of every degree from 0 to
    past two batches (a batch's tail of every length)."""
    degrees = torch.arange(2 * cpu.EDGE_BATCH + 3)
    n = len(degrees)
    gen = torch.Generator().manual_seed(3)
    dst = torch.repeat_interleave(torch.arange(n), degrees)
    graph = torch.stack([torch.randint(0, n, dst.shape, generator=gen), dst])
    inputs = {name: torch.randn(n, 2, width, generator=gen).requires_grad_()
              for name, width in (("el", 1), ("er", 1), ("h", 3))}
    projection = torch.randn(n, 2, 3, generator=gen)
    results = []
    for batch in (cpu.EDGE_BATCH, 0):
        monkeypatch.setattr(cpu, "EDGE_BATCH", batch)
        monkeypatch.setattr(compiler, "_CACHE", compiler._SpecialisationCache())
        prog = sl.compile(gat_zip)
        assert ("j0 += " in prog.generate(inputs).source) == (batch > 0)
        out = prog(graph, **inputs)
        results.append([out, *torch.autograd.grad(out, list(inputs.values()), projection)])
    for batched, one_at_a_time in zip(*results, strict=True):
        assert torch.equal(batched, one_at_a_time)


def test_cache_hits_in_memory_and_new_shapes_build():
    prog = sl.compile(gat_zip)
    prog(EI, **GAT_INPUTS)
    before = jit.build_count
    prog(EI, **GAT_INPUTS)
    assert jit.build_count == before
    wider = {"el": double(N, 4, 1), "er": double(N, 4, 1), "h": double(N, 4, 3)}
    prog(EI, **wider)
    assert jit.build_count == before + 1


@pytest.mark.parametrize("shapes", [[(3,), (3, 1), (1,), (1, 3)], [(1, 3), (1,), (3, 1), (3,)]],
                         ids=["one order", "the other"])
def test_kernels_of_other_feature_shapes_never_share_an_op(shapes):
    """A compiled kernel and its op are identified by their whole interface: a generic program
    called on feature shapes that differ only in where a 1 is ((3,) and (3, 1), (1,) and (1, 3))
    builds one kernel per shape, in whichever order they come first, each with its own result."""
    def scaled_sum(v):
        return sum(e.w * e.src.x for e in v.inedges)

    prog = sl.compile(scaled_sum, generic_shapes=True)
    src, dst = EI
    w = torch.rand(EI.shape[1], dtype=torch.float64)
    for shape in shapes * 2:  # the second round hits each one's op
        x = torch.randn(N, *shape, dtype=torch.float64)
        expected = torch.zeros(N, *shape, dtype=torch.float64).index_add_(0, dst, w.view(-1, *[1] * len(shape)) * x[src])
        torch.testing.assert_close(prog(EI, x=x, w=w), expected)


SCRIPT = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, {tests!r})
    import seastar_layers as sl
    from seastar_layers.runtime import jit
    from test_language import gat_zip
    ei = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])
    out = sl.compile(gat_zip)(ei, el=torch.randn(3, 2, 1), er=torch.randn(3, 2, 1), h=torch.randn(3, 2, 5))
    print("builds", jit.build_count)
""")


def run_fresh_process(cache: Path, env_extra=None):
    env = dict(os.environ, SEASTAR_CACHE_DIR=str(cache), **(env_extra or {}))
    script = SCRIPT.format(tests=str(Path(__file__).parent))
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)


def test_disk_cache_hit_in_a_fresh_process(tmp_path):
    first = run_fresh_process(tmp_path)
    assert first.returncode == 0, first.stderr
    assert "builds 1" in first.stdout
    second = run_fresh_process(tmp_path)
    assert "builds 0" in second.stdout, second.stderr
    forced = run_fresh_process(tmp_path, {"SEASTAR_FORCE_REBUILD": "1"})
    assert "builds 1" in forced.stdout, forced.stderr


def test_cxx_is_read_as_a_command_line(tmp_path):
    """CXX holding a command with arguments ("ccache g++", as setuptools reads it) builds a custom
    program; it was once taken as one executable's name.
    `env g++` stands in for ccache, which a machine may not have."""
    built = run_fresh_process(tmp_path, {"CXX": "env g++"})
    assert built.returncode == 0, built.stderr
    assert "builds 1" in built.stdout, built.stderr


def test_concurrent_builds_of_one_kernel(tmp_path):
    env = dict(os.environ, SEASTAR_CACHE_DIR=str(tmp_path))
    script = SCRIPT.format(tests=str(Path(__file__).parent))
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    assert len(list(tmp_path.glob("*.so"))) == 1
    assert not list(tmp_path.glob(".build-*"))


def test_corrupt_entry_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("SEASTAR_CACHE_DIR", str(tmp_path))
    for k, checksum in enumerate(["stale", None]):  # a wrong checksum; none at all (a crash mid-write)
        source = f'extern "C" int answer() {{ return {40 + k}; }}\n'
        key = jit.cache_key(source)
        (tmp_path / f"corrupt-{key}.so").write_bytes(b"\x7fELF garbage")
        if checksum:
            (tmp_path / f"corrupt-{key}.sha256").write_text(checksum)
        before = jit.build_count
        assert jit.load_library(source, stem="corrupt").answer() == 40 + k
        assert jit.build_count == before + 1


def test_no_jit_raises_clearly(monkeypatch, tmp_path):
    monkeypatch.setenv("SEASTAR_NO_JIT", "1")
    monkeypatch.setenv("SEASTAR_CACHE_DIR", str(tmp_path))
    with pytest.raises(BuildError, match="SEASTAR_NO_JIT=1"):
        jit.load_library("int x;", stem="nojit")


def test_debug_dump(tmp_path):
    env = dict(os.environ, SEASTAR_CACHE_DIR=str(tmp_path), SEASTAR_DEBUG="1")
    script = SCRIPT.format(tests=str(Path(__file__).parent))
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    for title in ["frontend"] + [stage.name for stage in PIPELINE]:
        assert f"---- {title}" in result.stderr
    assert "saved for backward" in result.stderr


def test_very_wide_features_run_from_heap_scratch():
    # per-row values live in heap scratch, not on a thread's stack: a 3M-wide row cannot overflow it
    def prog(v):
        m = max(nb.x for nb in v.innbs)
        return sum(torch.tanh(nb.x - m) * 2 for nb in v.innbs)

    ei = torch.tensor([[0, 1, 1], [1, 0, 1]])
    x = torch.randn(2, 3_000_000)
    m = torch.stack([x[1], torch.maximum(x[0], x[1])])
    expected = torch.stack([torch.tanh(x[1] - m[0]) * 2, (torch.tanh(x[0] - m[1]) + torch.tanh(x[1] - m[1])) * 2])
    torch.testing.assert_close(sl.compile(prog)(ei, x=x), expected)
