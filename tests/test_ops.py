"""Every op's definition (ir/ops.py) is complete and means what torch means: its C expression and its
gradient rule, run through the whole pipeline below the frontend, against its torch evaluation; its
frontend spellings against the per-vertex oracle."""
import hashlib
import math

import pytest
import torch
from helpers import oracle, random_graph

import seastar_layers as sl
from seastar_layers.codegen import TARGETS
from seastar_layers.codegen.cstyle import _MATH
from seastar_layers.compiler import run_pipeline
from seastar_layers.graph import Graph
from seastar_layers.ir import OPS, Builder, BufferKey, Kind, Op, Role, Space
from seastar_layers.ir.ops import fold
from seastar_layers.runtime import jit
from seastar_layers.runtime.op import make_op

REQUIRED = {
    Kind.LEAF: (),
    Kind.ELEMENTWISE: ("torch", "grad", "c"),
    Kind.REDUCE: ("torch", "grad"),
    Kind.SHAPE: ("torch", "grad"),
    Kind.AGGREGATION: ("grad", "update"),
    Kind.RANDOM: ("grad", "c"),
}


def test_every_op_has_a_definition():
    assert set(OPS) == set(Op)


@pytest.mark.parametrize("op", list(Op), ids=lambda op: op.value)
def test_every_op_has_every_part_its_kind_needs(op):
    d = OPS[op]
    missing = [part for part in REQUIRED[d.kind] if getattr(d, part) is None]
    assert not missing, f"{op.name} lacks {missing}"
    if d.kind == Kind.ELEMENTWISE:
        assert d.functions or d.methods or d.operators or d.modules, f"{op.name} has no frontend spelling"
        if d.functions or d.methods:
            assert len(d.params) >= d.arity, f"{op.name}: its spellings' parameters must name every operand"
        assert set(d.attr_params.values()) == set(d.attrs), f"{op.name}: every attribute must be spelled"
        for fields in d.modules.values():
            assert set(fields) == set(d.attrs)
        operands = [f"x{k}" for k in range(d.arity)]
        for target in TARGETS.values():  # every dialect can spell the expression
            text = _MATH.sub(lambda m: target.math(m.group(1), "float32") + "(", d.c)
            text.format(*operands, **{a: 0.5 for a in d.attrs})
    if d.kind == Kind.AGGREGATION:
        assert d.start is not None and set(d.update.replace("{acc}", "").replace("{x}", "")) >= {";"}


# --- each elementwise op through the pipeline, below the frontend ------------------------------
N = 7
EI = random_graph(N, N, 24, seed=3)
GRAPH = Graph.from_edge_index(EI, N)
def _positive(t):
    return t.abs() + 0.5


SAMPLE = {  # operand values where the whole real line is not in an op's domain (or is ill-conditioned)
    Op.LOG: _positive, Op.SQRT: _positive, Op.POW: _positive, Op.DIV: _positive,
    Op.RECIP: lambda t: t.sign() * (t.abs() + 0.5),
}
ATTRS = {"slope": 0.1, "alpha": 0.7}


def elementwise_ops():
    return [op for op, d in OPS.items() if d.kind == Kind.ELEMENTWISE]


def build_op(op: Op, shape=(3,), dtype="float64"):
    """out_v = sum over in-edges of op(x_src, y_dst, z_edge...), built as IR and compiled."""
    b = Builder()
    d = OPS[op]
    spaces = [Space.SRC, Space.DST, Space.EDGE][:d.arity]
    names = ["x", "y", "z"][:d.arity]
    args = [b.input(BufferKey(Role.FEATURE, n, s), shape) for n, s in zip(names, spaces)]
    value = b.emit(op, args, **{a: ATTRS[a] for a in d.attrs})
    if b.node(value).space is not Space.EDGE:  # a unary op of a source value: make it per edge
        value = b.mul(value, b.input(BufferKey(Role.FEATURE, "one", Space.EDGE), ()))
    out = b.aggregate(Op.AGG_SUM, value, Space.DST)
    prog = b.program([(BufferKey(Role.OUTPUT, "out0", Space.DST), out)])
    c = run_pipeline(prog, "cpu", dtype)
    key = "t" + hashlib.sha256(c.source.encode()).hexdigest()[:16] + "_"
    source = c.source.replace("__SEASTAR_PREFIX__", key)
    lib = jit.load_library(source, stem=f"op_{op.value}")
    return make_op(key, "", lib, c.schedules["forward"], c.schedules["backward"],
                   {"float64": torch.float64, "float32": torch.float32}[dtype]), names


def reference(op: Op, tensors: dict):
    """The same sum computed with the op's torch evaluation, per edge."""
    d = OPS[op]
    src, dst = EI
    per_edge = [tensors[name][index] for name, index in (("x", src), ("y", dst), ("z", slice(None)))[:d.arity]]
    value = d.torch(*per_edge, **{a: ATTRS[a] for a in d.attrs})
    if d.arity == 1:
        value = value * tensors["one"][:, None]
    out = torch.zeros(N, *value.shape[1:], dtype=value.dtype)
    return out.index_add(0, dst, value)


@pytest.mark.parametrize("op", elementwise_ops(), ids=lambda op: op.value)
def test_elementwise_op_matches_torch_forward_and_gradcheck(op):
    compiled, names = build_op(op)
    gen = torch.Generator().manual_seed(0)
    rows = {"x": N, "y": N, "z": EI.shape[1]}
    tensors = {n: torch.randn(rows[n], 3, generator=gen, dtype=torch.float64) for n in names}
    tensors = {n: SAMPLE.get(op, lambda t: t)(t).requires_grad_() for n, t in tensors.items()}
    tensors["one"] = torch.ones(EI.shape[1], dtype=torch.float64)
    order = [b.key.name for b in compiled.inputs]

    def run(*ts):
        named = dict(zip(names, ts))
        named["one"] = tensors["one"]
        return compiled.forward(GRAPH.tensors(), [named[n] for n in order])[0]

    inputs = tuple(tensors[n] for n in names)
    torch.testing.assert_close(run(*inputs), reference(op, tensors))
    if op in (Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE):
        return  # piecewise constant: no gradient to check numerically
    if op is Op.DETACH:  # the value, and by definition no gradient (the numerical one is the identity's)
        out = run(*inputs)
        assert all(g is None or not g.any() for g in torch.autograd.grad(out.sum(), inputs, allow_unused=True))
        return
    # kinks (relu, abs, maximum at ties) are measure-zero for random inputs
    assert torch.autograd.gradcheck(run, inputs)


NAN_CASES = {  # where NaN and Inf come out, as in torch
    Op.MAXIMUM: [(math.nan, 1.0), (1.0, math.nan), (-math.inf, 2.0)],
    Op.MINIMUM: [(math.nan, 1.0), (1.0, math.nan), (math.inf, 2.0)],
    Op.RELU: [(math.nan,), (-math.inf,)],
    Op.RECIP: [(0.0,), (-0.0,)],
    Op.LOG: [(0.0,), (-1.0,)],
    Op.DIV: [(1.0, 0.0), (-1.0, 0.0), (0.0, 0.0)],
    Op.EXP: [(1000.0,), (-1000.0,), (math.inf,), (-math.inf,), (math.nan,), (-0.0,)],
}


@pytest.mark.parametrize("op", list(NAN_CASES), ids=lambda op: op.value)
def test_special_values_as_torch(op):
    compiled, names = build_op(op, shape=())
    order = [b.key.name for b in compiled.inputs]
    one_edge = torch.tensor([[0], [1]])
    graph = Graph.from_edge_index(one_edge, 2).tensors()
    for case in NAN_CASES[op]:
        named = {n: torch.tensor([case[k], case[k]], dtype=torch.float64) for k, n in enumerate(names)}
        named["z"] = named.get("z", torch.zeros(1, dtype=torch.float64))[:1]
        named["one"] = torch.ones(1, dtype=torch.float64)
        got = compiled.forward(graph, [named[n] for n in order])[0][1]
        expected = OPS[op].torch(*[torch.tensor(c, dtype=torch.float64) for c in case],
                                 **{a: ATTRS[a] for a in OPS[op].attrs})
        torch.testing.assert_close(got, expected, equal_nan=True)
        assert fold(op, list(case), {a: ATTRS[a] for a in OPS[op].attrs}) == pytest.approx(
            float(expected), nan_ok=True)


def _neighbours(points, dtype, count: int = 2000) -> torch.Tensor:
    """The `count` floats of `dtype` on either side of each point, the point included."""
    found = []
    for direction in (math.inf, -math.inf):
        x = torch.tensor(points, dtype=dtype)
        toward = torch.full_like(x, direction)
        for _ in range(count):
            found.append(x)
            x = torch.nextafter(x, toward)
    return torch.cat(found)


# where exp's result leaves the normal numbers, reaches 0 and overflows (float32, float64)
EXP_ENDS = {"float32": (-87.3365478515625, -103.97208, 88.72283935546875, 0.0),
            "float64": (-708.3964185322641, -745.1332191019412, 709.782712893384, 0.0)}


@pytest.mark.parametrize("dtype,low,high,ulps", [("float32", -110.0, 95.0, 1), ("float64", -750.0, 712.0, 2)])
def test_exp_is_accurate_across_its_whole_range(dtype, low, high, ulps):
    """The CPU dialect's exp (codegen/cpu.py: a polynomial its simd loops vectorise) against exp in
    higher precision, within `ulps` units in the last place of the result, from underflow through
    the subnormals to overflow, and float by float where the result turns subnormal, 0 or inf
    (the scaling by 2^n there has no branch of its own)."""
    torch_dtype = getattr(torch, dtype)
    x = torch.cat([torch.linspace(low, high, 40001, dtype=torch.float64).to(torch_dtype),
                   _neighbours(EXP_ENDS[dtype], torch_dtype)])
    compiled, _ = build_op(Op.EXP, shape=(x.numel(),), dtype=dtype)
    loop = Graph.from_edge_index(torch.tensor([[0], [0]]), 1).tensors()
    got = compiled.forward(loop, [x.view(1, -1), torch.ones(1, dtype=torch_dtype)])[0][0]
    exact = torch.exp(x.to(torch.float64))  # for float64 itself within an ulp: hence the half ulp of slack
    want = exact.to(torch_dtype)
    spacing = (torch.nextafter(want, torch.full_like(want, math.inf)) - want).to(torch.float64)
    error = (got.to(torch.float64) - exact.to(torch.float64)).abs()
    finite = torch.isfinite(want)
    assert torch.equal(torch.isinf(got), torch.isinf(want)), "overflows where exp does not, or not where it does"
    worst = (error[finite] / spacing[finite]).max().item()
    assert worst <= ulps + 0.5, f"{dtype} exp is off by {worst:.2f} units in the last place"


# --- every frontend spelling, end to end ---------------------------------------------------------
def spellings():
    for op, d in OPS.items():
        if d.kind == Kind.RANDOM:
            continue  # no oracle draws the same numbers: tests/test_random.py checks them statistically
        for fn in d.functions:
            yield pytest.param(op, "function", fn, id=f"{op.value}-{getattr(fn, '__name__', fn)}")
        for m in d.methods:
            yield pytest.param(op, "method", m, id=f"{op.value}-.{m}")
        for module in d.modules:
            yield pytest.param(op, "module", module, id=f"{op.value}-{module.__name__}")


@pytest.mark.parametrize("op,how,spelling", list(spellings()))
def test_spelling_lowers_to_its_op(op, how, spelling, tmp_path):
    d = OPS[op]
    attrs = ", 0.3" if d.attr_params else ""
    if how == "function":
        call = {1: "F(nb.x{a})", 2: "F(nb.x, v.y)", 3: "F(nb.x > v.y, nb.x, v.y)"}[d.arity]
        env = {"F": spelling}
    elif how == "method":
        call = f"nb.x.{spelling}({attrs.lstrip(', ')})" if d.arity == 1 else f"nb.x.{spelling}(v.y)"
        env = {}
    else:
        module = spelling(*([0.3] if d.modules[spelling] else []))
        call, env = "M(nb.x)", {"M": module}
    call = call.replace("{a}", attrs)
    path = tmp_path / f"spelled_{op.value}_{how}.py"
    path.write_text(f"def spelled(v):\n    return sum({call} for nb in v.innbs)\n")
    namespace = dict(env)
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    fn = namespace["spelled"]
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(N, 3, generator=gen, dtype=torch.float64)
    y = torch.randn(N, 3, generator=gen, dtype=torch.float64)
    if op in SAMPLE or op is Op.POW:
        x = _positive(x)
    feats = {"x": x} if d.arity == 1 else {"x": x, "y": y}
    out = sl.compile(fn)(EI, **feats)
    torch.testing.assert_close(out, oracle(fn, EI, N, out, **feats))


def test_erf_in_a_gelu_program(tmp_path):
    path = tmp_path / "gelu_prog.py"
    path.write_text("import math, torch\n"
                    "def gelu_sum(v):\n"
                    "    return sum(nb.x * 0.5 * (1 + torch.erf(nb.x / math.sqrt(2.0))) for nb in v.innbs)\n")
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    x = torch.randn(N, 4, dtype=torch.float64, requires_grad=True)
    out = sl.compile(namespace["gelu_sum"])(EI, x=x)
    src, dst = EI
    expected = torch.zeros(N, 4, dtype=torch.float64).index_add(0, dst, torch.nn.functional.gelu(x[src]))
    torch.testing.assert_close(out, expected)
    assert torch.autograd.gradcheck(lambda t: sl.compile(namespace["gelu_sum"])(EI, x=t), (x,))
