"""Inputs and conditions a careless or hostile user brings (issue 12): each case failed before.

Cases that used to crash the interpreter run in a subprocess, so a crash fails the test instead of
ending the run.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

import seastar_layers as sl

TESTS = str(Path(__file__).parent)


def run_isolated(code: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter (with this directory importable); a crash shows as its return code."""
    script = f"import sys; sys.path.insert(0, {TESTS!r})\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], env=dict(os.environ, **(env or {})), capture_output=True,
                          text=True, timeout=timeout)


def assert_clean_exit(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, f"exit code {result.returncode}\n{result.stdout}\n{result.stderr[-3000:]}"


# ---- concurrent first calls -------------------------------------------------------------------

THREADS = 8


def first_calls_at_once(prog, scale: float, calls_per_thread: int = 6) -> list[BaseException]:
    """THREADS threads make their first call to prog (tanh(x) * scale summed over in-neighbours) at the same
    moment; the errors they hit."""
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    start = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def work():
        try:
            start.wait()
            for _ in range(calls_per_thread):
                x = torch.randn(4, 3, dtype=torch.float64)
                torch.testing.assert_close(prog(edge_index, x=x), torch.tanh(x[[3, 0, 1, 2]]) * scale)
        except BaseException as e:  # noqa: BLE001 - collected and reported by the test
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_first_calls_from_many_threads_all_succeed():
    for k in range(3):  # several new specialisations: the race is at the first call of each
        scale = 1.25 + k  # a closed-over number is compiled in, so each round is a new kernel

        def scaled_tanh_sum(v):
            return sum(torch.tanh(nb.x) * scale for nb in v.innbs)

        errors = first_calls_at_once(sl.compile(scaled_tanh_sum), scale)
        assert not errors, errors


def tanh_sum(v):
    return sum(torch.tanh(nb.x) * 1.25 for nb in v.innbs)


def test_first_calls_from_many_processes_and_threads_all_succeed(tmp_path):
    code = """
        import seastar_layers as sl
        from test_hostile import first_calls_at_once, tanh_sum

        errors = first_calls_at_once(sl.compile(tanh_sum), 1.25)
        assert not errors, errors
        print("ok")
    """
    env = dict(os.environ, SEASTAR_CACHE_DIR=str(tmp_path), PYTHONPATH=TESTS)
    script = textwrap.dedent(code)
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    assert len(list(tmp_path.glob("*.so"))) == 1


# ---- sl.Graph(...) checks what kernels rely on ------------------------------------------------

def neighbour_sum(v):
    return sum(nb.x for nb in v.innbs)


def malformed_layouts():
    """(what is wrong, the six arrays and two counts of sl.Graph(...)): each once reached the kernels unchecked."""
    from helpers import random_graph

    good = sl.Graph.from_edge_index(random_graph(6, 6, 20), 6)
    arrays = good.tensors()

    def with_(k, t):
        return [t if i == k else a for i, a in enumerate(arrays)]

    yield "'in_indptr' must start at 0 and end", [*with_(0, arrays[0] * 2), 6, 6]
    yield "'in_indptr' must be non-decreasing", [*with_(0, torch.tensor([0, 9, 3, 9, 9, 12, 23])), 6, 6]
    yield "'in_indptr' must have 7 entries", [*with_(0, arrays[0][:-1]), 6, 6]
    yield "'in_src' must hold vertex indices in \\[0, 6\\)", [*with_(1, arrays[1] + 100), 6, 6]
    yield "'in_src' must hold vertex indices", [*with_(1, arrays[1] - 100), 6, 6]
    yield "'in_eid' must hold edge ids in \\[0, 23\\)", [*with_(2, arrays[2] + 1000), 6, 6]
    yield "'out_eid' must hold every edge id", [*with_(5, torch.zeros_like(arrays[5])), 6, 6]
    yield "'out_eid' must have one entry per edge", [*with_(5, arrays[5][:3]), 6, 6]
    yield "describe different edges", [*with_(5, arrays[5].flip(0)), 6, 6]
    yield "describe different edges", [*with_(4, arrays[4].roll(1)), 6, 6]
    yield "'in_src' must hold vertex indices in \\[0, 3\\)", [*arrays, 3, 6]
    yield "'num_dst' must be >= 0", [*arrays, 6, -1]
    yield "'num_src' must be an int", [*arrays, "6", 6]
    yield "Expected 'in_src' to be of integer type \\(int32 or int64\\), got torch.float32", \
        [*with_(1, arrays[1].float()), 6, 6]
    yield "must be 1-d", [*with_(1, arrays[1][None]), 6, 6]
    yield "'out_dst' must be a 1-d torch.Tensor", [*with_(4, arrays[4].tolist()), 6, 6]


def test_malformed_graph_layouts_raise_clearly_in_a_subprocess():
    result = run_isolated("""
        import torch, seastar_layers as sl
        from test_hostile import malformed_layouts, neighbour_sum
        for expected, args in malformed_layouts():
            try:
                graph = sl.Graph(*args)
                sl.compile(neighbour_sum)(graph, x=torch.randn(graph.num_src, 3))
                print("ACCEPTED", expected)
            except (TypeError, ValueError) as e:
                print(type(e).__name__, "|", expected, "|", e)
    """)
    assert_clean_exit(result)
    lines = result.stdout.splitlines()
    assert len(lines) == len(list(malformed_layouts())), result.stdout
    for line in lines:
        kind, expected, message = line.split(" | ", 2)
        assert kind in ("TypeError", "ValueError"), line
        assert re.search(expected, message), line
        assert "sl.Graph" in message


def test_graph_from_int32_layouts_is_accepted():
    result = run_isolated("""
        import torch, seastar_layers as sl
        from helpers import random_graph
        from test_hostile import neighbour_sum

        reference = sl.Graph.from_edge_index(random_graph(6, 6, 20), 6)
        graph = sl.Graph(*[t.to(torch.int32) for t in reference.tensors()], 6, 6)
        x = torch.randn(6, 3, dtype=torch.float64)
        torch.testing.assert_close(sl.compile(neighbour_sum)(graph, x=x), sl.compile(neighbour_sum)(reference, x=x))
    """)
    assert_clean_exit(result)


# ---- the graph cache is never stale, and lets freed graphs go ---------------------------------

def pyg_pair(name, **kwargs):
    import torch_geometric.nn as pyg_nn

    torch.manual_seed(0)
    ref = getattr(pyg_nn, name)(**kwargs)
    ours = getattr(sl, name)(**kwargs)
    ours.load_state_dict(ref.state_dict(), strict=True)
    return ref.eval(), ours.eval()


LAYERS = [("GATConv", dict(in_channels=5, out_channels=3, heads=2)), ("GCNConv", dict(in_channels=5, out_channels=3)),
          ("APPNP", dict(K=2, alpha=0.1))]


def test_edits_that_bypass_the_version_counter_are_seen():
    from helpers import random_graph

    prog = sl.compile(neighbour_sum)
    x = torch.randn(12, 5, dtype=torch.float64)
    layers = [pyg_pair(name, **kwargs) for name, kwargs in LAYERS]
    for edit in (lambda ei: ei.numpy().__setitem__((0, slice(None)), ei.numpy()[0, ::-1].copy()),
                 lambda ei: ei.data[1].copy_(ei.data[1].roll(3))):
        edge_index = random_graph(12, 12, 40)
        prog(edge_index, x=x)
        for _, ours in layers:
            ours(x.float(), edge_index)
        version = edge_index._version
        edit(edge_index)
        assert edge_index._version == version  # the edit is invisible to the version counter
        torch.testing.assert_close(prog(edge_index, x=x), prog(edge_index.clone(), x=x))
        for ref, ours in layers:
            torch.testing.assert_close(ours(x.float(), edge_index), ref(x.float(), edge_index), atol=1e-5, rtol=1e-5)


def test_fingerprint_sees_every_single_index_edit():
    """The graph cache's stamp of an edge_index (graph.py: _fingerprint), on arrays of several
    blocks: changing one index anywhere, by any amount, changes it, and so does swapping two."""
    from seastar_layers.graph import _extension, _fingerprint

    assert _extension() is not None  # the extension's hash, which the layers use on the CPU
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.int64, torch.int32):
        edge_index = torch.randint(0, 1000, (2, 9001), generator=gen, dtype=dtype)
        base = _fingerprint(edge_index)
        assert _fingerprint(edge_index.clone()) == base
        deltas = (1, -1, 999, 1 << 30) + ((1 << 32, 1 << 40) if dtype == torch.int64 else ())
        for position in torch.randint(0, edge_index.numel(), (40,), generator=gen).tolist():
            for delta in deltas:
                edited = edge_index.clone()
                edited.view(-1)[position] += delta
                assert _fingerprint(edited) != base, (dtype, position, delta)
        swapped = edge_index.clone()
        swapped[:, [10, 8000]] = swapped[:, [8000, 10]]
        assert not torch.equal(swapped, edge_index) and _fingerprint(swapped) != base
        assert _fingerprint(edge_index[:, 1:]) != _fingerprint(edge_index[:, :-1])  # non-contiguous rows
        threads = torch.get_num_threads()
        try:  # it runs on torch's threads (one in a forked DataLoader worker), whatever their number
            torch.set_num_threads(1)
            assert _fingerprint(edge_index) == base
        finally:
            torch.set_num_threads(threads)
    # bytes that are not whole 32-bit words, read from an address that is not word-aligned
    data = torch.randint(0, 256, (20003,), generator=gen, dtype=torch.uint8)
    assert _fingerprint(data[1:]) == _fingerprint(data[1:].clone()) != _fingerprint(data[:-1])


def test_dgl_edge_edits_that_keep_the_counts_are_seen():
    import seastar_layers.dgl as sd

    dgl = sd.dgl
    g = dgl.graph((torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 3, 0])), num_nodes=4)
    x = torch.randn(4, 3)
    ours = sd.GraphConv(3, 2, norm="none", allow_zero_in_degree=True)
    ref = dgl.nn.GraphConv(3, 2, norm="none", allow_zero_in_degree=True)
    ref.load_state_dict(ours.state_dict())
    ours(g, x)
    g.remove_edges(torch.tensor([0]))
    g.add_edges(torch.tensor([3]), torch.tensor([3]))
    assert g.num_edges() == 4
    torch.testing.assert_close(ours(g, x), ref(g, x))


def test_freed_graphs_leave_the_cache_in_a_subprocess():
    result = run_isolated("""
        import gc, torch, seastar_layers as sl
        from seastar_layers.graph import graph_cache

        def rss_mb():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096 / 2**20

        before = rss_mb()
        for k in range(10):  # ten 2M-edge graphs, each about 90 MB as both CSR layouts
            edge_index = torch.randint(0, 100_000, (2, 2_000_000), generator=torch.Generator().manual_seed(k))
            sl.graph.as_graph(edge_index, 100_000)
            del edge_index
        gc.collect()
        print("entries", len(graph_cache._entries), "growth_mb", round(rss_mb() - before))
    """)
    assert_clean_exit(result)
    _, entries, _, growth = result.stdout.split()
    assert int(entries) == 0
    # ten kept graphs measure about 940 MB; the allocator keeps some freed memory, never most of it
    assert int(growth) < 350, result.stdout


def test_layers_and_programs_under_inference_mode():
    from helpers import random_graph

    x = torch.randn(12, 5)
    for name, kwargs in LAYERS:
        ref, ours = pyg_pair(name, **kwargs)
        with torch.inference_mode():
            edge_index = random_graph(12, 12, 40)
            torch.testing.assert_close(ours(x, edge_index), ref(x, edge_index), atol=1e-5, rtol=1e-5)
    with torch.inference_mode():
        edge_index = random_graph(12, 12, 40)
        out = sl.compile(neighbour_sum)(edge_index, x=x)
    torch.testing.assert_close(out, sl.compile(neighbour_sum)(edge_index.clone(), x=x))


def test_numpy_integer_sizes_are_accepted():
    import numpy as np
    from helpers import random_graph

    edge_index = random_graph(6, 6, 20)
    x = torch.randn(6, 5)
    expected = sl.compile(neighbour_sum)(edge_index, size=(6, 6), x=x)
    torch.testing.assert_close(sl.compile(neighbour_sum)(edge_index, size=(np.int64(6), np.int64(6)), x=x), expected)
    torch.testing.assert_close(sl.compile(neighbour_sum)(edge_index, size=np.int32(6), x=x), expected)
    ref, ours = pyg_pair("GATConv", in_channels=5, out_channels=3, heads=2)
    torch.testing.assert_close(ours(x, edge_index, size=(np.int64(6), np.int64(6))),
                               ref(x, edge_index, size=(np.int64(6), np.int64(6))))


def test_edge_index_that_wrongly_claims_to_be_sorted():
    from torch_geometric import EdgeIndex

    edge_index = torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0]])  # sorted by row, not by col
    x = torch.randn(4, 5)
    expected = sl.compile(neighbour_sum)(edge_index, x=x)
    truthful = EdgeIndex(edge_index, sparse_size=(4, 4), sort_order="row")
    torch.testing.assert_close(sl.compile(neighbour_sum)(truthful, x=x), expected)
    lying = EdgeIndex(edge_index, sparse_size=(4, 4), sort_order="col")
    with pytest.raises(ValueError, match="claims to be sorted by col but is not"):
        sl.compile(neighbour_sum)(lying, x=x)
    ref, ours = pyg_pair("GCNConv", in_channels=5, out_channels=3)  # the layers read its edges, not its caches
    torch.testing.assert_close(ours(x, lying), ref(x, edge_index))


# ---- layers: valid input accepted, invalid input refused clearly --------------------------------

def test_gat_with_dropout_one_in_training_gives_the_bias():
    from helpers import random_graph

    import seastar_layers.dgl as sd

    def with_bias(ref, ours):  # layers start with a zero bias; make the expected result stand out
        torch.nn.init.normal_(ref.bias)
        ours.load_state_dict(ref.state_dict())
        return ref.train(), ours.train()

    x, edge_index = torch.randn(12, 5), random_graph(12, 12, 40)
    ref, ours = with_bias(*pyg_pair("GATConv", in_channels=5, out_channels=3, heads=2, dropout=1.0))
    torch.testing.assert_close(ours(x, edge_index), ref(x, edge_index))
    assert torch.equal(ours(x, edge_index), ours.bias.expand(12, 6).detach())

    dgl = sd.dgl
    g = dgl.add_self_loop(dgl.graph((edge_index[0], edge_index[1]), num_nodes=12))
    ref, ours = with_bias(dgl.nn.GATConv(5, 3, num_heads=2, attn_drop=1.0), sd.GATConv(5, 3, num_heads=2, attn_drop=1.0))
    torch.testing.assert_close(ours(g, x), ref(g, x))
    assert torch.equal(ours(g, x), ours.bias.view(1, 2, 3).expand(12, 2, 3).detach())


def test_a_python_list_as_edge_index_says_what_is_accepted():
    x = torch.randn(3, 5)
    for name, kwargs in LAYERS:
        ref, ours = pyg_pair(name, **kwargs)
        with pytest.raises(ValueError) as pyg_error:
            ref(x, [[0, 1], [1, 2]])
        with pytest.raises(ValueError, match="'edge_index' must be a torch.Tensor of shape \\(2, E\\)") as our_error:
            ours(x, [[0, 1], [1, 2]])
        assert "list" in str(our_error.value), (str(our_error.value), str(pyg_error.value))


# every dtype but int32 and int64: PyG's GCNConv and APPNP and DGL refuse the narrower integers too
INDEX_DTYPES_REFUSED = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.bool, torch.complex64,
                        torch.int8, torch.int16, torch.uint8]


def _edge_index_as(dtype, requires_grad=False):
    edges = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])
    return edges.to(dtype).requires_grad_(requires_grad)


def _graph_entry_points():
    """(name, call(edge_index)) for every entry point that takes a graph as an edge_index."""
    x = torch.randn(3, 5)
    for name, kwargs in LAYERS:
        _, ours = pyg_pair(name, **kwargs)
        yield name, lambda ei, layer=ours: layer(x, ei)
    features = torch.randn(3, 2)
    yield "sl.compile program", lambda ei: sl.compile(neighbour_sum)(ei, x=features)
    yield "sl.Graph.from_edge_index", lambda ei: sl.Graph.from_edge_index(ei)


@pytest.mark.parametrize("dtype", INDEX_DTYPES_REFUSED, ids=str)
def test_an_edge_index_that_is_not_integer_is_refused_as_pyg(dtype):
    """A float edge_index was truncated (1.7 read as vertex 1); PyG and DGL refuse it."""
    for name, call in _graph_entry_points():
        with pytest.raises(TypeError, match=f"Expected 'edge_index' to be of integer type \\(int32 or int64\\), "
                                            f"got {dtype}") as error:
            call(_edge_index_as(dtype))
        assert "requires grad" not in str(error.value), name


def test_an_edge_index_that_requires_grad_is_refused_saying_why():
    for name, call in _graph_entry_points():
        with pytest.raises(TypeError, match="got torch.float32; it requires grad.*indices are not differentiable"):
            call(_edge_index_as(torch.float32, requires_grad=True))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_integer_edge_indices_are_accepted_by_every_entry_point(dtype):
    for name, call in _graph_entry_points():
        expected = call(_edge_index_as(torch.int64))
        got = call(_edge_index_as(dtype))
        if isinstance(got, sl.Graph):
            assert [t.tolist() for t in got.tensors()] == [t.tolist() for t in expected.tensors()], name
        else:
            torch.testing.assert_close(got, expected, msg=name)


# ---- NaN and Inf where PyG's would come out -----------------------------------------------------

def neighbour_max(v):
    return max(nb.x for nb in v.innbs)


def divide_by_zero(v):
    return sum(nb.x / 0 for nb in v.innbs)


def test_max_aggregation_propagates_nan_as_pyg():
    from torch_geometric.utils import scatter

    edge_index = torch.tensor([[0, 1, 2, 2, 3], [1, 1, 3, 4, 4]])
    x = torch.tensor([[1.0, float("nan")], [float("nan"), float("nan")], [2.0, 3.0], [float("nan"), -1.0], [0.0, 0.0]])
    ours = sl.compile(neighbour_max)(edge_index, x=x)
    expected = scatter(x[edge_index[0]], edge_index[1], dim=0, dim_size=5, reduce="max")
    torch.testing.assert_close(ours, expected, equal_nan=True)
    assert torch.isnan(ours[1]).all()  # an all-NaN neighbourhood gives NaN, not -inf


def test_division_by_zero_gives_infinities():
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    x = torch.tensor([[1.0], [-2.0], [0.0]])
    out = sl.compile(divide_by_zero)(edge_index, x=x)
    torch.testing.assert_close(out, x[[2, 0, 1]] / 0, equal_nan=True)


def test_appnp_takes_a_very_wide_feature_as_pyg():
    # per-row values live in heap scratch, not on a thread's stack
    import torch_geometric.nn as pyg_nn

    edge_index = torch.tensor([[0, 1, 2, 3, 1], [1, 2, 3, 0, 3]])
    x = torch.randn(4, 3_000_000)
    torch.testing.assert_close(sl.APPNP(K=2, alpha=0.1)(x, edge_index), pyg_nn.APPNP(K=2, alpha=0.1)(x, edge_index))


# ---- a program's source edited after import -----------------------------------------------------

USER_MODULE = '''
import torch
import torch as th


class Model:
    def program(self, scale):
        def scaled_sum(v):
            """Sums the in-neighbours' rows,
            scaled."""
            return sum(th.tanh(nb.x) * scale * 2 for nb in v.innbs)
        return scaled_sum


def untouched(v):
    return sum(torch.exp(nb.x) for nb in v.innbs)
'''


def test_source_edited_after_import_is_refused(tmp_path, monkeypatch):
    import importlib

    (tmp_path / "edited_after_import.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("edited_after_import")
    edge_index, x = torch.tensor([[0, 1], [1, 0]]), torch.randn(2, 3)
    program = module.Model().program(0.5)
    torch.testing.assert_close(sl.compile(program)(edge_index, x=x), torch.tanh(x.flip(0)))  # unedited: compiles

    (tmp_path / "edited_after_import.py").write_text(USER_MODULE.replace("scale * 2", "scale * 3"))
    with pytest.raises(sl.CompileError, match="scaled_sum in .*edited_after_import.py \\(line 8\\) is not the code "
                                              "that is running: the file was edited after it was imported"):
        sl.compile(program)(edge_index, x=x.double())  # a new specialisation reads the source again
    # the running code of the other function still matches its (unmoved) text
    torch.testing.assert_close(sl.compile(module.untouched)(edge_index, x=x), torch.exp(x.flip(0)))


# ---- the kernel cache loads nothing another user could have written ------------------------------

def answer_source(value: int) -> str:
    return f'extern "C" int answer() {{ return {value}; }}\n'


def test_cache_directory_writable_by_others_is_refused(tmp_path, monkeypatch):
    from seastar_layers.runtime import jit

    for mode, who in ((0o777, "others"), (0o1777, "others"), (0o775, "its group")):
        shared = tmp_path / f"shared-{mode:o}"
        shared.mkdir()
        shared.chmod(mode)
        monkeypatch.setenv("SEASTAR_CACHE_DIR", str(shared))
        with pytest.raises(PermissionError, match=f"kernel cache {shared}: it is writable by {who} .*chmod go-w"):
            jit.load_library(answer_source(1), stem=f"shared{mode:o}")
        assert not list(shared.iterdir())  # nothing built there, nothing loaded


def give_to_another_user(path: Path) -> None:
    try:
        os.chown(path, 65534, 65534, follow_symlinks=False)  # nobody
    except PermissionError:
        pytest.skip("this machine cannot give a file to another user (the tests do not run as root)")


def test_cache_directory_of_another_owner_is_refused(tmp_path, monkeypatch):
    from seastar_layers.runtime import jit

    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    give_to_another_user(theirs)
    monkeypatch.setenv("SEASTAR_CACHE_DIR", str(theirs))
    with pytest.raises(PermissionError, match="it is owned by uid 65534, not by you"):
        jit.load_library(answer_source(2), stem="theirs")
    mine = tmp_path / "link-to-theirs"  # a path of one's own that leads there changes nothing
    mine.symlink_to(theirs)
    monkeypatch.setenv("SEASTAR_CACHE_DIR", str(mine))
    with pytest.raises(PermissionError, match="it is owned by uid 65534, not by you"):
        jit.load_library(answer_source(2), stem="theirs")


def test_planted_library_is_refused(tmp_path, monkeypatch):
    """Another user's library with a matching checksum beside it, where ours would be."""
    from seastar_layers.runtime import jit

    planted = tmp_path / "planted.so"
    (tmp_path / "planted.cpp").write_text(answer_source(666))
    subprocess.run(["g++", "-shared", "-fPIC", str(tmp_path / "planted.cpp"), "-o", str(planted)], check=True)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("SEASTAR_CACHE_DIR", str(cache))
    source = answer_source(7)
    key = jit.cache_key(source)

    def plant(stem: str, how) -> Path:
        target = cache / f"{stem}-{key}.so"
        how(target)
        (cache / f"{stem}-{key}.sha256").write_text(jit.hashlib.sha256(planted.read_bytes()).hexdigest())
        return target

    def foreign(target):
        target.write_bytes(planted.read_bytes())
        give_to_another_user(target)

    def group_writable(target):
        target.write_bytes(planted.read_bytes())
        target.chmod(0o775)

    cases = [("groupwritable", group_writable, "is writable by its group"),
             ("symlink", lambda target: target.symlink_to(planted), "cannot be opened as a plain file"),
             ("foreign", foreign, "is owned by uid 65534")]
    for stem, how, reason in cases:
        target = plant(stem, how)
        with pytest.raises(PermissionError, match=f"refusing to load {target}: it {reason}.*Delete it"):
            jit.load_library(source, stem=stem)
    assert jit.load_library(source, stem="honest").answer() == 7  # an entry of our own still builds and loads


def test_new_cache_is_private_whatever_the_umask(tmp_path):
    cache = tmp_path / "new" / "cache"
    code = f"""
        import os
        os.umask(0o002)  # group-writable by default, as on many Linux desktops
        from seastar_layers.runtime import jit
        assert jit.load_library({answer_source(9)!r}, stem="private").answer() == 9
        print("builds", jit.build_count)
    """
    for builds in ("builds 1", "builds 0"):  # the second process loads what the first built
        result = run_isolated(code, env={"SEASTAR_CACHE_DIR": str(cache)})
        assert_clean_exit(result)
        assert builds in result.stdout
    assert cache.stat().st_mode & 0o777 == 0o700
    for f in cache.iterdir():
        assert f.stat().st_mode & 0o022 == 0, (f, oct(f.stat().st_mode))


# ---- fuzz: random small graphs and malformed inputs, a clear exception or PyG's result ----------

CLEAR = (TypeError, ValueError)  # what our checks raise: they name the argument and what was expected


def fuzz_examples() -> int:
    """A few seconds in CI; SEASTAR_FUZZ_EXAMPLES=2000 (say) for a bigger run by hand."""
    return int(os.environ.get("SEASTAR_FUZZ_EXAMPLES", "25"))


def announce(case) -> None:
    """Written before each case runs, so the last line of a crashed run names the input that crashed it."""
    print("case", repr(case)[:400], file=sys.stderr, flush=True)


def check_against_its_edges(graph: sl.Graph, src: torch.Tensor, dst: torch.Tensor) -> None:
    """A graph that was accepted must sum over the edges src -> dst, forward and backward, as torch does."""
    x = torch.randn(graph.num_src, 2, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(graph.num_dst, 2, dtype=torch.float64)
    out = sl.compile(neighbour_sum)(graph, x=x)
    expected = torch.zeros(graph.num_dst, 2, dtype=torch.float64).index_add(0, dst, x[src])
    torch.testing.assert_close(out, expected)
    (grad,) = torch.autograd.grad((out * weights).sum(), x)
    (expected_grad,) = torch.autograd.grad((expected * weights).sum(), x)
    torch.testing.assert_close(grad, expected_grad)


def fuzz_graph_constructors(max_examples: int, derandomize: bool) -> None:
    import numpy as np
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @st.composite
    def edge_index_and_size(draw):
        n = draw(st.integers(0, 6))
        shape = draw(st.sampled_from([(2, None), (2, None), (2, None), (3, None), (None,), (2, None, 1)]))
        e = draw(st.integers(0, 12))
        shape = tuple(e if d is None else d for d in shape)
        dtype = draw(st.sampled_from([torch.int64, torch.int64, torch.int32, torch.float32, torch.bool, torch.int16]))
        low = draw(st.sampled_from([0, 0, 0, -2]))
        high = max(n + draw(st.sampled_from([0, 0, 0, 2])), low + 1)
        values = torch.tensor(draw(st.lists(st.integers(low, high - 1), min_size=math_prod(shape),
                                            max_size=math_prod(shape))), dtype=torch.int64).reshape(shape)
        size = draw(st.sampled_from([None, n, (n, n), (n, max(n - 1, 0)), (-1, n), "n", (n,), np.int64(n), 2.5]))
        return values.to(dtype), size

    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=derandomize,
              suppress_health_check=list(HealthCheck))
    @given(edge_index_and_size())
    def from_edge_index(case):
        announce(case)
        edge_index, size = case
        try:
            graph = sl.Graph.from_edge_index(edge_index, size)
        except CLEAR:
            return
        check_against_its_edges(graph, edge_index[0].long(), edge_index[1].long())

    @st.composite
    def mutated_layouts(draw):
        n = draw(st.integers(1, 6))
        arrays = sl.Graph.from_edge_index(draw(edge_lists(n)), n).tensors()
        counts = [n, n]
        for _ in range(draw(st.integers(0, 3))):
            k = draw(st.integers(0, 5))
            kind = draw(st.sampled_from(["set", "drop", "int32", "float", "swap", "count"]))
            if kind == "set" and arrays[k].numel():
                arrays[k] = arrays[k].clone()
                arrays[k][draw(st.integers(0, arrays[k].numel() - 1))] = draw(st.integers(-3, arrays[1].numel() + 3))
            elif kind == "drop":
                arrays[k] = arrays[k][:-1]
            elif kind in ("int32", "float"):
                arrays[k] = arrays[k].to(torch.int32 if kind == "int32" else torch.float32)
            elif kind == "swap":
                j = draw(st.integers(0, 5))
                arrays[k], arrays[j] = arrays[j], arrays[k]
            else:
                counts[k % 2] += draw(st.sampled_from([-1, 1]))
        return arrays, counts

    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=derandomize,
              suppress_health_check=list(HealthCheck))
    @given(mutated_layouts())
    def from_layouts(case):
        announce(case)
        arrays, (num_src, num_dst) = case
        try:
            graph = sl.Graph(*arrays, num_src, num_dst)
        except CLEAR:
            return
        rows = torch.repeat_interleave(torch.arange(graph.num_dst), graph.in_indptr[1:] - graph.in_indptr[:-1])
        dst, src = torch.empty_like(graph.in_src, dtype=torch.int64), torch.empty_like(graph.in_src, dtype=torch.int64)
        dst[graph.in_eid], src[graph.in_eid] = rows, graph.in_src.long()
        check_against_its_edges(graph, src, dst)

    from_edge_index()
    from_layouts()


def edge_lists(n: int):
    """(2, E) int64 edge_index over n vertices: multi-edges and self-loops included."""
    from hypothesis import strategies as st

    @st.composite
    def draw_edges(draw):
        e = draw(st.integers(0, 14))
        src = draw(st.lists(st.integers(0, n - 1), min_size=e, max_size=e))
        dst = draw(st.lists(st.integers(0, n - 1), min_size=e, max_size=e))
        return torch.tensor([src, dst], dtype=torch.int64).reshape(2, e)

    return draw_edges()


def math_prod(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def fuzz_layers(max_examples: int, derandomize: bool) -> None:
    import torch_geometric.nn as pyg_nn
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    layer_configs = [("GATConv", dict(in_channels=4, out_channels=3, heads=2)),
                     ("GATConv", dict(in_channels=4, out_channels=2, heads=1, add_self_loops=False, concat=False)),
                     ("GCNConv", dict(in_channels=4, out_channels=3)),
                     ("GCNConv", dict(in_channels=4, out_channels=3, add_self_loops=False, normalize=False)),
                     ("APPNP", dict(K=2, alpha=0.2))]
    layers = []
    for name, kwargs in layer_configs:
        torch.manual_seed(0)
        ref = getattr(pyg_nn, name)(**kwargs).eval()
        ours = getattr(sl, name)(**kwargs).eval()
        ours.load_state_dict(ref.state_dict())
        layers.append((ref, ours))

    @st.composite
    def layer_call(draw):
        n = draw(st.integers(1, 7))
        edge_index = draw(edge_lists(n))
        e = edge_index.shape[1]
        damage = draw(st.sampled_from(["none"] * 6 + ["int32", "float", "list", "3 rows", "transposed", "too large",
                                                      "negative", "wrong width", "1-d"]))
        x = torch.randn(n, 4)
        if damage == "int32":
            edge_index = edge_index.int()
        elif damage == "float":
            edge_index = edge_index.float()
        elif damage == "list":
            edge_index = edge_index.tolist()
        elif damage == "3 rows":
            edge_index = torch.cat([edge_index, edge_index[:1]])
        elif damage == "transposed":
            edge_index = edge_index.t()
        elif damage in ("too large", "negative") and e:
            edge_index[draw(st.integers(0, 1)), draw(st.integers(0, e - 1))] = n + 3 if damage == "too large" else -2
        elif damage == "wrong width":
            x = torch.randn(n, 5)
        elif damage == "1-d":
            edge_index = edge_index.reshape(-1)
        return draw(st.integers(0, len(layers) - 1)), x, edge_index, damage

    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=derandomize,
              suppress_health_check=list(HealthCheck))
    @given(layer_call())
    def call(case):
        announce(case)
        k, x, edge_index, _ = case
        ref, ours = layers[k]
        try:
            expected = ref(x, edge_index)
        except Exception as e:  # noqa: BLE001 - PyG's refusal decides what ours may raise
            pyg_error = e
        else:
            pyg_error = None
        try:
            out = ours(x, edge_index)
        except CLEAR:
            return
        except Exception as e:  # noqa: BLE001
            assert pyg_error is not None and type(e) is type(pyg_error), (case, repr(e), repr(pyg_error))
            return
        assert pyg_error is None, (case, "ours accepted what PyG refused", repr(pyg_error))
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)

    call()


def test_fuzz_graph_constructors_and_layer_calls_never_crash():
    examples = fuzz_examples()
    derandomize = "SEASTAR_FUZZ_EXAMPLES" not in os.environ  # CI runs the same examples every time
    result = run_isolated(f"""
        from test_hostile import fuzz_graph_constructors, fuzz_layers
        fuzz_graph_constructors({examples}, {derandomize})
        fuzz_layers({examples}, {derandomize})
        print("fuzzed")
    """, timeout=3600)
    assert_clean_exit(result)
    assert "fuzzed" in result.stdout
