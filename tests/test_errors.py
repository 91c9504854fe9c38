"""Every refusal of the compiler: a CompileError naming the construct, pointing at the user's line."""
import inspect

import pytest
import torch
import torch.nn.functional as F
from helpers import random_graph

import seastar_layers as sl

N = 10
EI = random_graph(N, N, 30)
FEATS = {"x": torch.randn(N, 4), "y": torch.randn(N, 4), "m": torch.randn(N, 3)}
WEIGHT = torch.randn(4, 4)


def uses_matmul(v):
    return sum(torch.matmul(nb.x, WEIGHT) for nb in v.innbs)


def uses_at(v):
    return sum(nb.x @ WEIGHT for nb in v.innbs)


def uses_while(v):
    while True:
        return v.x


def uses_print(v):
    print(v.x)
    return v.x


def uses_if_on_tensor(v):
    if v.x.sum() > 0:
        return v.x
    return -v.x


def reads_missing(v):
    return sum(nb.nonexistent for nb in v.innbs)


def bad_broadcast(v):
    return sum(nb.x * v.m for nb in v.innbs)


def unknown_function(v):
    return sum(F.gelu(nb.x) for nb in v.innbs)


def unpacks_keywords(v):
    kw = {"negative_slope": 0.2}
    return sum(F.leaky_relu(nb.x, **kw) for nb in v.innbs)


def unpacks_arguments(v):
    pair = [v.x, v.y]
    return torch.maximum(*pair)


def helper_not_in_language(x):
    return [x for _ in range(3)]


def uses_bad_helper(v):
    return helper_not_in_language(v.x)


def inplace_on_tensor(v):
    out = v.x
    out += 1
    return out


def returns_neighbours(v):
    return [nb for nb in v.innbs]  # a per-neighbour list of tensors is a per-edge result; of neighbours, nothing


def python_max_of_tensors(v):
    return max(v.x, v.y)


def nested_neighbourhoods(v):
    return sum(sum(nb2.x for nb2 in v.innbs) for nb in v.innbs)


def bad_param_shape(v):
    return sum(nb.x * BIG for nb in v.innbs)


BIG = torch.randn(5, 3, 4)


def line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    for k, line in enumerate(lines):
        if text in line:
            return first + k
    raise AssertionError(text)


CASES = [
    (uses_matmul, "torch.matmul", "unsupported function torch.matmul"),
    (uses_at, "@", "unsupported operator @"),
    (uses_while, "while True", "while loop"),
    (uses_print, "print(v.x)", "unsupported function print"),
    (uses_if_on_tensor, "if v.x", "`if` on a tensor value"),
    (reads_missing, "nonexistent", "feature 'nonexistent', which was not passed (features passed: m, x, y)"),
    (bad_broadcast, "nb.x * v.m", "cannot broadcast `nb.x` (feature shape [4]) with `v.m` (feature shape [3])"),
    (unknown_function, "gelu", "unsupported function F.gelu"),
    (inplace_on_tensor, "out += 1", "modifies it in place"),
    (returns_neighbours, "return [nb for", "a per-neighbour list"),
    (python_max_of_tensors, "max(v.x", "use torch.maximum"),
    (nested_neighbourhoods, "sum(sum(", "nested loops over neighbourhoods"),
    (bad_param_shape, "nb.x * BIG", "BIG of shape [5, 3, 4] cannot broadcast"),
    # refused at the call, not at the literal on the line before (which the language refuses too)
    (unpacks_keywords, "**kw", "**kw in a call to F.leaky_relu is not supported"),
    (unpacks_arguments, "*pair", "*pair in a call to torch.maximum is not supported"),
]


@pytest.mark.parametrize("fn,where,message", CASES, ids=[c[0].__name__ for c in CASES])
def test_refusal_points_at_the_line(fn, where, message):
    with pytest.raises(sl.CompileError) as info:
        sl.compile(fn)(EI, **FEATS)
    err = info.value
    assert message in str(err)
    assert err.location is not None
    assert err.location.filename == __file__
    assert err.location.lineno == line_of(fn, where)
    assert where in err.location.line
    rendered = str(err).splitlines()
    caret_line = next(line for line in rendered if line.strip() == "^")
    assert len(caret_line) - 1 - 4 == err.location.col  # the caret sits under the column
    # no compiler frames: the traceback ends in the public entry point, not in the frontend
    frames = [f.name for f in __import__("traceback").extract_tb(info.tb)]
    assert "visit" not in frames and "lower" not in frames


def test_helper_errors_point_into_the_helper():
    with pytest.raises(sl.CompileError) as info:
        sl.compile(uses_bad_helper)(EI, x=FEATS["x"])
    assert info.value.location.lineno == line_of(helper_not_in_language, "return [x")


def helper_with_tensor_default(x, w=WEIGHT):
    return x * w.sum()


def uses_helper_with_tensor_default(v):
    return helper_with_tensor_default(v.x)


def test_helper_tensor_defaults_are_refused():
    with pytest.raises(sl.CompileError, match="defaults of helpers must be numbers"):
        sl.compile(uses_helper_with_tensor_default)(EI, x=FEATS["x"])


def test_lambda_is_refused():
    with pytest.raises(sl.CompileError, match="lambda"):
        sl.compile(lambda v: v.x)(EI, x=FEATS["x"])


def test_unused_feature_is_refused():
    def prog(v):
        return v.x

    with pytest.raises(TypeError, match="never reads: y"):
        sl.compile(prog)(EI, x=FEATS["x"], y=FEATS["y"])


def test_wrong_rows_name_the_feature():
    def prog(v):
        return sum(nb.x for nb in v.innbs)

    with pytest.raises(ValueError, match="'x' is read as nb.x and needs one row per source vertex"):
        sl.compile(prog)(EI, size=(N + 3, N), x=FEATS["x"])


def test_mixed_dtypes_and_bad_inputs():
    def prog(v):
        return sum(nb.x + v.y for nb in v.innbs)

    with pytest.raises(TypeError, match="share one dtype"):
        sl.compile(prog)(EI, x=FEATS["x"], y=FEATS["y"].double())
    with pytest.raises(TypeError, match="compiled programs support float32, float64, float16 and bfloat16"):
        sl.compile(prog)(EI, x=FEATS["x"].long(), y=FEATS["y"].long())
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        sl.compile(prog)(EI, x=[1.0], y=FEATS["y"])
    with pytest.raises(TypeError, match="edge_index tensor"):
        sl.compile(prog)("graph", x=FEATS["x"], y=FEATS["y"])


def test_bad_edge_index():
    with pytest.raises(ValueError, match="shape \\(2, E\\)"):
        sl.Graph.from_edge_index(torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="int32 or int64"):
        sl.Graph.from_edge_index(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="larger than 4"):
        sl.Graph.from_edge_index(torch.tensor([[0, 7], [1, 2]]), size=5)
    with pytest.raises(ValueError, match="negative"):
        sl.Graph.from_edge_index(torch.tensor([[0, -1], [1, 2]]))
