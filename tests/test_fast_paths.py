"""compile's fast_sizes: kernels with common sizes as constants, run when the sizes match.

A fast path must give the generic kernel's bits. The prebuilt GAT kernels have one for 8 heads of 8
channels; padding x with a channel of zeros sends the same arithmetic through the generic kernel
(the extra channel adds exact zeros to every dot product), so the two are compared bit for bit.
"""
import re

import pytest
import torch
import torch.nn.functional as F
from helpers import checked_variants, grads
from test_cuda_dialect import hub_graph, layer_program_inputs

import seastar_layers as sl
from seastar_layers.nn.programs import GAT_ATTENTION


def scaled_attention(v):
    weights = [torch.exp(F.leaky_relu(e.src.a + v.b, 0.2)) for e in v.inedges]
    total = sum(weights)
    return sum(w / total * e.src.x for w, e in zip(weights, v.inedges))


SHAPES = {"a": ("heads", 1), "b": ("heads", 1), "x": ("heads", "channels")}


def features(n: int, heads: int, channels: int, dtype=torch.float64, seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(n, heads, 1, generator=gen, dtype=dtype).requires_grad_(),
            "b": torch.randn(n, heads, 1, generator=gen, dtype=dtype).requires_grad_(),
            "x": torch.randn(n, heads, channels, generator=gen, dtype=dtype).requires_grad_()}


def test_source_has_the_fast_path_and_its_dispatch():
    prog = sl.compile(scaled_attention, shapes=SHAPES, fast_sizes=[{"heads": 8, "channels": 8}])
    source = prog.source(**features(3, 2, 3))
    assert "_forward_kernel0_fast0(const forward_params& p)" in source
    # the portable build gives a fast path's kernels an AVX-512 clone too (codegen/cpu.py: CLONES): the
    # function holding their rows' work, which the kernel calls on one thread or a team's
    assert re.search(r'"arch=x86-64-v4", "arch=x86-64-v3", "default"\)\)\)\n#endif\n'
                     r"static void \w+_forward_kernel0_fast0_rows\(", source)
    assert re.search(r"SEASTAR_CLONES static void \w+_forward_kernel0_rows\(", source)
    assert "if (s0 == 8 && s1 == 8) {  // fast path 0" in source
    assert "const int64_t s0 = 8; (void)s0;" in source
    # on the CPU the half types keep the generic kernels only, on a GPU float64 (Dialect.pinned_dtypes)
    assert "fast path" not in prog.source(**features(3, 2, 3, dtype=torch.float16))
    assert "fast path" not in prog.source("cuda", **features(3, 2, 3, dtype=torch.float64))
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        assert "fast path 0" in prog.source("cuda", **features(3, 2, 3, dtype=dtype))


@pytest.mark.parametrize("emulate,dtype", [(False, torch.float64), (True, torch.float32), (True, torch.float16),
                                           (True, torch.bfloat16)],
                         ids=["cpu", "cuda-emulation", "cuda-emulation-float16", "cuda-emulation-bfloat16"])
def test_a_fast_path_gives_the_generic_kernels_bits(monkeypatch, emulate, dtype):
    """A compiled program with and without fast_sizes, at the pinned sizes and at others, on a graph
    with a hub and rows without in-edges: the same bits, forward and backward, in each dtype the
    dialect pins (Dialect.pinned_dtypes)."""
    if emulate:
        monkeypatch.setenv("SEASTAR_EMULATE_CUDA", "1")
    n = 30
    ei = hub_graph(n, seed=2)
    fast = sl.compile(scaled_attention, shapes=SHAPES, fast_sizes={"heads": 8, "channels": 8})
    generic = sl.compile(scaled_attention, shapes=SHAPES)
    for heads, channels in ((8, 8), (8, 3), (2, 8)):
        feats = features(n, heads, channels, dtype, seed=heads * channels)
        outs = [prog(ei, **feats) for prog in (fast, generic)]
        assert torch.equal(outs[0], outs[1])
        for got, want in zip(grads(outs[0], list(feats.values())), grads(outs[1], list(feats.values())),
                             strict=True):
            assert torch.equal(got, want)


def as_tuple(results) -> tuple:
    return results if isinstance(results, tuple) else (results,)


def padded_channel(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x.detach(), torch.zeros(*x.shape[:-1], 1, dtype=x.dtype)], -1).requires_grad_()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_prebuilt_gat_fast_paths_give_the_generic_kernels_bits(dtype):
    """Every prebuilt GAT variant (each option, dropout and for_backward included) and checked_variants' sample of
    those compiled on first use (attention weights, masks, float64) at 8 heads of 8 channels, the fast path,
    against the generic kernel on x padded to 9 channels."""
    n = 40
    ei = hub_graph(n, seed=4)
    variants = [(program, example) for _, _, program, example in checked_variants(GAT_ATTENTION, [dtype])]
    assert len(variants) == (16 + 9 if dtype == torch.float32 else 14)
    for program, example in variants:
        feats = layer_program_inputs(example, n, ei.shape[1], torch.Generator().manual_seed(len(example)),
                                     heads=8, channels=8)
        wide = {name: padded_channel(t) if name == "x" else t for name, t in feats.items()}
        # a variant with for_backward off has no backward: it runs where autograd records nothing
        with torch.set_grad_enabled(program.for_backward is not False):
            torch.manual_seed(0)  # attention dropout: both draw the same bits, keyed by edge and head
            fast = program(ei, **feats)
            torch.manual_seed(0)
            generic = program(ei, **wide)
        fast, generic = as_tuple(fast), as_tuple(generic)
        generic = (generic[0][..., :8],) + generic[1:]  # the output's padded channel is exactly 0
        for got, want in zip(fast, generic, strict=True):
            assert torch.equal(got, want)
        if program.for_backward is False:
            continue
        fast_grads = grads(fast, list(feats.values()))
        generic_grads = grads(generic, list(wide.values()))
        for name, got, want in zip(feats, fast_grads, generic_grads, strict=True):
            assert torch.equal(got, want[..., :8] if name == "x" else want), name


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(fast_sizes=[{"heads": 8}]), TypeError, "pass shapes= as well"),
    (dict(shapes=SHAPES, fast_sizes=[{"head": 8}]), ValueError, "names 'head', which no declared shape has"),
    (dict(shapes=SHAPES, fast_sizes=[{"heads": 0}]), ValueError, "gives 'heads' the size 0"),
    (dict(shapes=SHAPES, fast_sizes=[{"heads": True}]), ValueError, "gives 'heads' the size True"),
    (dict(shapes=SHAPES, fast_sizes=[8]), TypeError, "must be dicts of named sizes"),
    (dict(shapes=SHAPES, fast_sizes=[{}]), TypeError, "must be dicts of named sizes"),
])
def test_bad_fast_sizes_are_refused_by_name(kwargs, error, match):
    with pytest.raises(error, match=match):
        sl.compile(scaled_attention, **kwargs)
