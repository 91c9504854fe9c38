"""torch.rand_like in vertex programs: counter-based draws, keyed by a seed the runtime takes from
torch's generator, the edge (or row), the element and the call site. Checked statistically, for
reproducibility under torch.manual_seed, for forward/backward consistency (the backward regenerates
the forward's draws) and for bit-equality between the CPU and the CUDA dialect (under emulation)."""
import math

import pytest
import torch
from helpers import random_graph

import seastar_layers as sl

KEEP = 0.7
N, E, F = 60, 500, 24
EI = random_graph(N, N, E, seed=4)


def dropout(v):
    kept = [torch.rand_like(nb.x) < KEEP for nb in v.innbs]
    return sum(torch.where(k, nb.x / KEEP, 0.0) for k, nb in zip(kept, v.innbs)), kept


def draws(v):
    # per edge (inside the comprehension) and per vertex (outside); two calls are two draws
    return [torch.rand_like(e.w) for e in v.inedges], [torch.rand_like(e.w) for e in v.inedges], torch.rand_like(v.y)


def features(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(N, F, generator=gen, dtype=torch.float64, requires_grad=True),
            "w": torch.randn(EI.shape[1], F, generator=gen), "y": torch.randn(N, F, generator=gen)}


def test_draws_are_uniform_and_independent():
    torch.manual_seed(0)
    first, second, per_vertex = sl.compile(draws)(EI, w=features()["w"], y=features()["y"])
    for u in (first, second, per_vertex):
        n = u.numel()
        assert 0 <= float(u.min()) and float(u.max()) < 1
        assert abs(float(u.mean()) - 0.5) < 5 * math.sqrt(1 / 12 / n)  # 5 sigma
        assert abs(float(u.var()) - 1 / 12) < 0.01
        counts = torch.histc(u, bins=10, min=0, max=1)  # chi-square over ten bins, 9 degrees of freedom
        assert float(((counts - n / 10) ** 2 / (n / 10)).sum()) < 40
    # neighbouring elements, neighbouring edges and the two call sites are uncorrelated
    for a, b in [(first[:, :-1], first[:, 1:]), (first[:-1], first[1:]), (first, second)]:
        assert abs(float(torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1])) < 0.03


def test_dropout_keeps_its_share_and_is_reproducible():
    feats = features()
    prog = sl.compile(dropout)
    torch.manual_seed(7)
    out, kept = prog(EI, x=feats["x"])
    kept = kept.detach()
    n = kept.numel()
    assert abs(float(kept.mean()) - KEEP) < 5 * math.sqrt(KEEP * (1 - KEEP) / n)
    torch.manual_seed(7)
    out_again, kept_again = prog(EI, x=feats["x"])
    assert torch.equal(out, out_again) and torch.equal(kept, kept_again)
    _, kept_next = prog(EI, x=feats["x"])  # the next call draws a new seed
    assert not torch.equal(kept, kept_next)


def test_backward_regenerates_the_forward_draws():
    feats = features()
    torch.manual_seed(3)
    out, kept = sl.compile(dropout)(EI, x=feats["x"])
    src, dst = EI
    expected = torch.zeros_like(out).index_add(0, dst, torch.where(kept.bool(), feats["x"][src] / KEEP, 0.0))
    torch.testing.assert_close(out, expected)
    (grad,) = torch.autograd.grad(out.sum(), feats["x"])
    torch.testing.assert_close(grad, torch.zeros_like(grad).index_add(0, src, kept.double() / KEEP))


def test_gradcheck_with_a_fixed_seed():
    x = features()["x"][:, :3].detach().requires_grad_()  # narrow: gradcheck perturbs every element

    def run(t):
        with torch.random.fork_rng():
            torch.manual_seed(11)
            return sl.compile(dropout)(EI, x=t)[0]

    assert torch.autograd.gradcheck(run, (x,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cpu_and_cuda_dialects_draw_the_same_bits(monkeypatch, dtype):
    w, y = features()["w"].to(dtype), features()["y"].to(dtype)
    torch.manual_seed(5)
    on_cpu = sl.compile(draws)(EI, w=w, y=y)
    monkeypatch.setenv("SEASTAR_EMULATE_CUDA", "1")
    torch.manual_seed(5)
    emulated = sl.compile(draws)(EI, w=w, y=y)
    for a, b in zip(on_cpu, emulated):
        assert torch.equal(a, b)
