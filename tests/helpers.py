"""Test helpers: random graphs with every awkward case, and the naive oracle for vertex programs."""
from __future__ import annotations

import builtins
import contextlib
import types

import torch


def options_id(options) -> str:
    """A test id that names functions by name (their repr holds an address, which differs between
    pytest-xdist's workers, which must collect the same ids) and has no spaces (scripts/gpu_check.sh
    passes test ids on a command line)."""
    return ",".join(f"{k}={getattr(v, '__name__', v)}" for k, v in options.items()) if options else "defaults"


def checked_variants(family, dtypes=None):
    """(options, dtype, program, example features) of an op family: every variant the extension holds
    on the CPU (nn/programs.py: is_prebuilt), and of those compiled on first use a sample of the same
    generator's output: no option, each option alone, all but one and all (each takes a JIT build of
    seconds; all 64 of GAT's would take minutes per dtype)."""
    from seastar_layers.nn.programs import is_prebuilt

    for options, dtype, program, features in family.variants(dtypes):
        if is_prebuilt("cpu", options, dtype) or len(options) <= 1 or len(options) >= len(family.options) - 1:
            yield options, dtype, program, features


def random_graph(num_src: int, num_dst: int, num_edges: int, seed: int = 0) -> torch.Tensor:
    """(2, E) edges with isolated vertices, zero in-degree destinations, multi-edges and, when the
    graph is not bipartite, self-loops."""
    gen = torch.Generator().manual_seed(seed)
    # the last destination and the last source take part in no edge
    src = torch.randint(0, max(num_src - 1, 1), (num_edges,), generator=gen)
    dst = torch.randint(0, max(num_dst - 1, 1), (num_edges,), generator=gen)
    extra_src, extra_dst = [src[0], src[1]], [dst[0], dst[1]]  # duplicates: multi-edges
    if num_src == num_dst:
        extra_src.append(torch.tensor(2))
        extra_dst.append(torch.tensor(2))  # a self-loop
    src = torch.cat([src, torch.stack(extra_src)])
    dst = torch.cat([dst, torch.stack(extra_dst)])
    return torch.stack([src, dst])


class _Degree(int):
    """len(v.innbs) in the oracle: dividing by the length of an empty neighbourhood gives 0, as the
    compiler defines mean over no neighbours (PyG's convention)."""

    def __rtruediv__(self, other):
        return other * 0 if int(self) == 0 else other / int(self)


def _elementwise(pairwise, on_numbers):
    """max/min as the compiler defines them: elementwise, and 0 over no neighbours (like Python's sum)."""

    def reduce(items):
        items = list(items)
        if not items:
            return 0
        out = items[0]
        for x in items[1:]:
            both_numbers = not isinstance(out, torch.Tensor) and not isinstance(x, torch.Tensor)
            out = on_numbers(out, x) if both_numbers else pairwise(torch.as_tensor(out), torch.as_tensor(x))
        return out

    return reduce


def oracle(fn, edge_index: torch.Tensor, num_dst: int, like, **features):
    """Run fn once per destination vertex in plain Python and stack the results.

    `like` (a tensor or tuple of tensors) gives the result shapes for vertices whose result is the
    number 0 (aggregations over no neighbours)."""
    src, dst = edge_index.tolist()
    in_edges = [[] for _ in range(num_dst)]
    for k, (u, w) in enumerate(zip(src, dst)):
        in_edges[w].append((k, u))

    class Row:
        def __init__(self, index):
            self._index = index

        def __getattr__(self, name):
            return features[name][self._index]

    class Edge(Row):
        def __init__(self, k, u, w):
            super().__init__(k)
            self.src, self.dst = Row(u), Row(w)

    class Vertex(Row):
        @property
        def innbs(self):
            return [Row(u) for _, u in in_edges[self._index]]

        @property
        def inedges(self):
            return [Edge(k, u, self._index) for k, u in in_edges[self._index]]

    def length(x):
        return _Degree(builtins.len(x)) if isinstance(x, list) else builtins.len(x)

    glob = dict(fn.__globals__, max=_elementwise(torch.maximum, builtins.max),
                min=_elementwise(torch.minimum, builtins.min), len=length)
    plain = types.FunctionType(fn.__code__, glob, fn.__name__, fn.__defaults__, fn.__closure__)
    likes = like if isinstance(like, tuple) else (like,)
    per_vertex = [plain(Vertex(i)) for i in range(num_dst)]
    per_vertex = [r if isinstance(like, tuple) else (r,) for r in per_vertex]
    outs = []
    for k, ref in enumerate(likes):
        if any(isinstance(r[k], list) for r in per_vertex):  # a per-neighbour list: one row per edge
            rows = [None] * len(src)
            for w, r in enumerate(per_vertex):
                for (eid, _), item in zip(in_edges[w], r[k], strict=True):
                    item = item if isinstance(item, torch.Tensor) else torch.tensor(float(item), dtype=ref.dtype)
                    rows[eid] = torch.broadcast_to(item, ref.shape[1:])
            outs.append(torch.stack(rows).reshape(ref.shape) if rows else ref.new_zeros(ref.shape))
            continue
        rows = []
        for r in per_vertex:
            r = r[k]
            # a vertex with no neighbours may get a plain 0 (or a 0-d product with it) from Python's sum
            r = r if isinstance(r, torch.Tensor) else torch.tensor(float(r), dtype=ref.dtype)
            rows.append(torch.broadcast_to(r, ref.shape[1:]))
        outs.append(torch.stack(rows).reshape(ref.shape))
    return tuple(outs) if isinstance(like, tuple) else outs[0]


def grads(outputs, inputs, seed: int = 1):
    """Gradients of a fixed random projection of the outputs w.r.t. inputs (None where unused)."""
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    gen = torch.Generator().manual_seed(seed)
    loss = sum((o * torch.randn(o.shape, generator=gen, dtype=o.dtype)).sum() for o in outputs)
    if not loss.requires_grad:  # e.g. a graph without edges: the result is constant
        return tuple(None for _ in inputs)
    return torch.autograd.grad(loss, inputs, allow_unused=True)


def assert_close(actual, expected, atol=1e-9, rtol=1e-7):
    if isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_close(a, e, atol, rtol)
        return
    if expected is None:
        assert actual is None or torch.count_nonzero(actual) == 0
        return
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)


def assert_same_signatures(theirs, ours):
    """Every argument of the library's constructor and forward is one of ours, same kind and default
    (annotations aside), so nothing a user passes is dropped or bound to another parameter."""
    import inspect

    for method in ("__init__", "forward"):
        expected, got = (inspect.signature(getattr(cls, method)).parameters.values() for cls in (theirs, ours))
        assert [(p.name, p.kind, p.default) for p in got] == [(p.name, p.kind, p.default) for p in expected], \
            f"{ours.__qualname__}.{method}"


def kept_share_is_plausible(kept: torch.Tensor, keep: float) -> bool:
    """The share of kept coefficients is within 5 standard errors of the keep probability."""
    n = kept.numel()
    return abs(float(kept.float().mean()) - keep) < 5 * (keep * (1 - keep) / n) ** 0.5


@contextlib.contextmanager
def stock_dropout_replays(kept: torch.Tensor):
    """Inside, F.dropout on a tensor with kept's number of elements (the stock layers' attention
    dropout, PyG's F.dropout and DGL's nn.Dropout alike) drops where kept is False and scales as
    F.dropout does; other calls (feature dropout) draw as usual. Our layers draw their attention
    dropout in the kernel; replaying their draws in the stock layer compares results exactly."""
    original = torch.nn.functional.dropout

    def replay(input, p=0.5, training=True, inplace=False):
        if not training or input.numel() != kept.numel():
            return original(input, p, training, inplace)
        return input * kept.reshape(input.shape).to(input.dtype) / (1 - p)

    torch.nn.functional.dropout = replay
    try:
        yield
    finally:
        torch.nn.functional.dropout = original


def draws(layer, args, count: int, seed: int = 0) -> torch.Tensor:
    """count training-mode outputs of layer, seeded once: (count, *output shape) on the CPU."""
    torch.manual_seed(seed)
    with torch.no_grad():
        return torch.stack([layer(*args).double().cpu() for _ in range(count)])


def assert_unbiased(samples: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Dropout rescales what it keeps, so the mean of many draws tends to the eval output: the
    distance of the sample mean from it must be what the spread of the samples explains (within 4
    of its standard errors; for a dropout that is not rescaled this fails by far)."""
    mean, var = samples.mean(0), samples.var(0)
    assert var.sum() > 0, f"{what}: no dropout happened in training"
    error = (mean - expected.double().cpu()).norm()
    standard_error = (var.sum() / samples.shape[0]).sqrt()
    assert error < 4 * standard_error, f"{what}: the mean of {samples.shape[0]} draws is {error:.3g} from the eval " \
                                       f"output, {error / standard_error:.1f} standard errors"


class RecordingOp:
    """Stands in for torch.ops.seastar_layers.<name> (called as the packet or as .default) and
    records each call's positional arguments before running the op."""

    def __init__(self, name: str):
        self.op = getattr(torch.ops.seastar_layers, name)
        self.calls: list[tuple] = []

    def __call__(self, *args):
        self.calls.append(args)
        return self.op(*args)

    def default(self, *args):
        return self(*args)


def leading_rows_cases(n_src: int, n_dst: int, width: int, case: str, seed: int = 1):
    """(leaf, x, x_dst, hooked): features for a block whose destinations come as x_dst, as `case` makes
    them: "leaf", "computed" (x made from the leaf) and "no-grad" pass x[:n_dst]; "retained" and
    "hooked" the same with its gradient retained or a hook recording it (in hooked); "detached" and
    "copied" rows that only hold x's values (x.detach()[:n_dst], x[:n_dst].clone())."""
    leaf = torch.randn(n_src, width, generator=torch.Generator().manual_seed(seed)).requires_grad_(case != "no-grad")
    x = leaf * 2 if case == "computed" else leaf
    x_dst = x.detach()[:n_dst] if case == "detached" else x[:n_dst].clone() if case == "copied" else x[:n_dst]
    hooked = []
    if case == "retained":
        x_dst.retain_grad()
    if case == "hooked":
        x_dst.register_hook(hooked.append)
    return leaf, x, x_dst, hooked


LEADING_ROWS_CASES = ["leaf", "computed", "no-grad", "retained", "hooked", "detached", "copied"]
