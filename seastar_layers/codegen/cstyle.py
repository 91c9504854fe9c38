"""One C-like renderer for scheduled programs; dialects (CPU now, CUDA next) override a few pieces.

Every value is a small array indexed by its flat feature index: inputs and buffers are pointers
into a row, computed values are local arrays, constants are literals. Each elementwise node is a
loop nest over its feature shape with broadcasting folded into the operand index expressions.
"""
from __future__ import annotations

import math

from ..ir import Op, Space
from ..ir.ops import AGG_START, AGGREGATIONS, ELEMENTWISE
from ..ir.program import size_expr, symbols_of
from ..passes.schedule import Kernel, Schedule

# op -> C expression over operand expressions {0}, {1}, {2} and attributes by name
C_EXPR = {
    Op.NEG: "(-{0})",
    Op.RECIP: "((scalar_t)1 / {0})",
    Op.EXP: "std::exp({0})",
    Op.LOG: "std::log({0})",
    Op.SQRT: "std::sqrt({0})",
    Op.ABS: "std::abs({0})",
    Op.SIGMOID: "((scalar_t)1 / ((scalar_t)1 + std::exp(-{0})))",
    Op.TANH: "std::tanh({0})",
    Op.RELU: "({0} > 0 ? {0} : (scalar_t)0)",
    Op.LEAKY_RELU: "({0} > 0 ? {0} : {0} * (scalar_t){slope})",
    Op.ELU: "({0} > 0 ? {0} : (scalar_t){alpha} * std::expm1({0}))",
    Op.ADD: "({0} + {1})",
    Op.SUB: "({0} - {1})",
    Op.MUL: "({0} * {1})",
    Op.DIV: "({0} / {1})",
    Op.POW: "std::pow({0}, {1})",
    Op.MAXIMUM: "({0} > {1} ? {0} : {1})",
    Op.MINIMUM: "({0} < {1} ? {0} : {1})",
    Op.LT: "(scalar_t)({0} < {1})",
    Op.LE: "(scalar_t)({0} <= {1})",
    Op.GT: "(scalar_t)({0} > {1})",
    Op.GE: "(scalar_t)({0} >= {1})",
    Op.EQ: "(scalar_t)({0} == {1})",
    Op.NE: "(scalar_t)({0} != {1})",
    Op.WHERE: "({0} != 0 ? {1} : {2})",
    Op.BROADCAST: "{0}",
}
AGG_UPDATE = {
    Op.AGG_SUM: "{acc} += {x};",
    Op.AGG_MAX: "{acc} = {x} > {acc} ? {x} : {acc};",
    Op.AGG_MIN: "{acc} = {x} < {acc} ? {x} : {acc};",
}
C_TYPES = {"float32": "float", "float64": "double"}

assert set(C_EXPR) >= ELEMENTWISE | {Op.BROADCAST}


BLOCK = 16  # features per register-resident accumulator block in blocked edge loops


def literal(value: float) -> str:
    if math.isnan(value):
        return "(scalar_t)NAN"
    if math.isinf(value):
        return "(scalar_t)INFINITY" if value > 0 else "(-(scalar_t)INFINITY)"
    return f"(scalar_t){value!r}"


def strides(shape) -> list:
    """Row-major strides: ints, or C expressions where the shape has symbols."""
    return [size_expr(shape[k + 1:]) for k in range(len(shape))]


def flat_index(shape, loop_vars: list[str], out_rank: int) -> str:
    """Index into a value of `shape` broadcast into an output of rank out_rank (right-aligned)."""
    terms = []
    offset = out_rank - len(shape)
    for d, (extent, stride) in enumerate(zip(shape, strides(shape), strict=True)):
        if extent != 1:
            var = loop_vars[d + offset]
            terms.append(var if stride == 1 else f"{var} * {stride}")
    return " + ".join(terms) or "0"


class CpuDialect:
    name = "cpu"
    preamble = "#include <cmath>\n#include <cstdint>\n"
    exported = 'extern "C" '

    def row_loop(self, n_rows: str) -> list[str]:
        return ["#pragma omp parallel for schedule(dynamic, 32) num_threads(num_threads)",
                f"for (int64_t r = 0; r < {n_rows}; ++r) {{"]


class KernelRenderer:
    """Renders one kernel of a schedule as a C function."""

    def __init__(self, sched: Schedule, kern: Kernel, name: str, dialect, buffer_index: dict[str, int],
                 symbols: list[str]):
        self.s, self.k, self.name, self.d = sched, kern, name, dialect
        self.symbols = symbols
        self.nodes = sched.program.nodes
        self.buffer_index = buffer_index
        self.lines: list[str] = []
        self.depth = 0
        self.ready: set[int] = set()  # values declared in the current scope chain
        self._lanes: set[int] = set()  # per-edge values held in registers inside a blocked loop

    # helpers -----------------------------------------------------------------------------------
    def emit(self, line: str):
        self.lines.append("  " * self.depth + line)

    def loop_nest(self, shape):
        """Loop variables i0, i1, ... over a feature shape, and the `for` headers (none for extent 1)."""
        loop_vars = [f"i{d}" for d in range(len(shape))]
        header = " ".join(f"for (int {v} = 0; {v} < {n}; ++{v})" for v, n in zip(loop_vars, shape, strict=True)
                          if n != 1)
        return loop_vars, header

    def access(self, i: int, idx: str) -> str:
        n = self.nodes[i]
        if n.op is Op.CONST:
            return literal(n.attr("value"))
        return f"v{i}[{idx}]"

    def is_row_level(self, i: int) -> bool:
        n = self.nodes[i]
        if n.op in AGGREGATIONS:
            return i in self.k.aggs or n.space is self.k.row_space
        return n.space in (self.k.row_space, Space.PARAM, Space.CONST)

    def pointer_for(self, i: int) -> str:
        """Where a value read from a buffer starts, for the current row or edge."""
        n = self.nodes[i]
        buf = self.s.reads[i]
        base = f"b{self.buffer_index[buf]}"
        size = n.size
        row = {self.k.row_space: "r", self.k.nbr_space: "nbr", Space.EDGE: "eid", Space.PARAM: None}[n.space]
        return base if row is None else f"{base} + {row} * {size}"

    # values ------------------------------------------------------------------------------------
    def require(self, i: int):
        """Emit value i (and what it needs) at the current position, if not already available."""
        if i in self.ready:
            return
        n = self.nodes[i]
        if n.op is Op.CONST:
            return
        if n.op is not Op.INPUT and not (n.op in AGGREGATIONS and i not in self.k.aggs):
            if n.op in AGGREGATIONS:
                raise AssertionError(f"aggregation %{i} used before its loop ran")
            for a in n.args:
                self.require(a)
        self.ready.add(i)
        if n.op is Op.INPUT or n.op in AGGREGATIONS:
            self.emit(f"const scalar_t* v{i} = {self.pointer_for(i)};")
        elif n.op is Op.RESHAPE:
            self.emit(f"const scalar_t* v{i} = v{n.args[0]};")
        elif n.op is Op.REDUCE_SUM:
            self.render_reduce(i)
        elif n.op in C_EXPR:
            self.render_elementwise(i)
        else:
            raise NotImplementedError(f"the renderer has no rule for {n.op.name}")

    def render_elementwise(self, i: int):
        n = self.nodes[i]
        loop_vars, header = self.loop_nest(n.shape)
        operands = [self.access(a, flat_index(self.nodes[a].shape, loop_vars, len(n.shape))) for a in n.args]
        expr = C_EXPR[n.op].format(*operands, **dict(n.attrs))
        self.emit(f"scalar_t v{i}[{n.size}];")
        self.emit(f"{header} v{i}[{flat_index(n.shape, loop_vars, len(n.shape))}] = {expr};".lstrip())

    def render_reduce(self, i: int):
        n = self.nodes[i]
        (x,) = n.args
        xshape = self.nodes[x].shape
        axes, keepdim = n.attr("axes"), n.attr("keepdim")
        loop_vars, header = self.loop_nest(xshape)
        kept_vars = [v for d, v in enumerate(loop_vars) if d not in axes]
        out_vars = [("0" if d in axes else v) for d, v in enumerate(loop_vars)] if keepdim else kept_vars
        out_idx = flat_index(n.shape, out_vars, len(n.shape)) if n.shape else "0"
        self.emit(f"scalar_t v{i}[{n.size}] = {{0}};")
        self.emit(f"{header} v{i}[{out_idx}] += {self.access(x, flat_index(xshape, loop_vars, len(xshape)))};")

    def store(self, buf: str, i: int, row: str):
        n = self.nodes[i]
        loop_vars, header = self.loop_nest(n.shape)
        idx = flat_index(n.shape, loop_vars, len(n.shape))
        target = f"b{self.buffer_index[buf]}[{row} * {n.size} + {idx}]"
        self.emit(f"{header} {target} = {self.access(i, idx)};".lstrip())

    # blocked edge loops ------------------------------------------------------------------------
    def lane_values(self, loop):
        """The per-edge values of a loop, in order, if it can run features-outer.

        A loop whose aggregations share one shape S, and whose per-edge values all have shape S or
        are scalars, is rendered as blocks of BLOCK features with accumulators in registers, the
        edges inside each block: an accumulator that lives in memory costs a load and a store per
        edge. Returns None where any per-edge value has another shape (or reduces or reshapes)."""
        if loop.edge_writes or not loop.aggs:
            return None
        shape = self.nodes[loop.aggs[0]].shape
        if not shape or any(self.nodes[a].shape != shape for a in loop.aggs):
            return None
        order, seen = [], set()

        def fits(i) -> bool:
            n = self.nodes[i]
            if n.op is Op.CONST:
                return True
            if n.shape not in ((), shape):  # also for values already computed: lanes index them flat
                return False
            if i in seen or i in self.ready:
                return True
            seen.add(i)
            if self.is_row_level(i) or n.op is Op.INPUT or n.op in AGGREGATIONS:
                return True  # a row value or a buffer read
            if n.op not in C_EXPR or not all(fits(a) for a in n.args):
                return False
            if n.shape == shape:
                order.append(i)
            return True

        if not all(fits(self.nodes[a].args[0]) for a in loop.aggs):
            return None
        return order

    def lane(self, i: int) -> str:
        """Value i at feature f0 + k of a blocked loop."""
        n = self.nodes[i]
        if n.op is Op.CONST:
            return literal(n.attr("value"))
        if n.shape == ():
            return f"v{i}[0]"
        return f"e{i}" if i in self._lanes else f"v{i}[f0 + k]"

    def render_blocked_loop(self, loop, lanes: list[int]):
        size = self.nodes[loop.aggs[0]].size
        self._lanes = set(lanes)
        for a in loop.aggs:
            self.emit(f"scalar_t v{a}[{size}];")
        self.emit(f"for (int64_t f0 = 0; f0 < {size}; f0 += {BLOCK}) {{")
        self.depth += 1
        # a constant trip count for full blocks keeps the accumulators in registers
        self.emit(f"if (f0 + {BLOCK} <= {size}) {{")
        self.render_block(loop, lanes, str(BLOCK))
        self.emit("} else {")
        self.render_block(loop, lanes, f"(int)(({size}) - f0)")
        self.emit("}")
        self.depth -= 1
        self.emit("}")
        self._lanes = set()
        self.finish_aggregations(loop)

    def render_block(self, loop, lanes: list[int], width: str):
        self.depth += 1
        for a in loop.aggs:
            start = literal(AGG_START[self.nodes[a].op])
            self.emit(f"scalar_t acc{a}[{BLOCK}]; for (int k = 0; k < {BLOCK}; ++k) acc{a}[k] = {start};")
        outer = self.open_edge_loop()
        needed = [arg for i in lanes for arg in self.nodes[i].args] + [self.nodes[a].args[0] for a in loop.aggs]
        for arg in needed:  # buffer reads and per-edge scalars, declared per edge
            if arg not in self._lanes:
                self.require(arg)
        self.emit("#pragma omp simd")
        self.emit(f"for (int k = 0; k < {width}; ++k) {{")
        self.depth += 1
        for i in lanes:
            n = self.nodes[i]
            expr = C_EXPR[n.op].format(*(self.lane(a) for a in n.args), **dict(n.attrs))
            self.emit(f"const scalar_t e{i} = {expr};")
        for a in loop.aggs:
            self.emit(AGG_UPDATE[self.nodes[a].op].format(acc=f"acc{a}[k]", x=self.lane(self.nodes[a].args[0])))
        self.depth -= 1
        self.emit("}")
        self.ready = outer
        self.depth -= 1
        self.emit("}")
        for a in loop.aggs:
            self.emit(f"for (int k = 0; k < {width}; ++k) v{a}[f0 + k] = acc{a}[k];")
        self.depth -= 1

    # kernel ------------------------------------------------------------------------------------
    def render(self) -> str:
        direction = self.k.direction.value
        self.emit(f"static void {self.name}(const int64_t* sizes, const int64_t* dims, const int64_t* const* graph, "
                  f"void* const* buffers, int num_threads) {{")
        self.depth += 1
        for line in dim_declarations(self.symbols):
            self.emit(line)
        csr = 0 if self.k.direction is Space.DST else 3
        self.emit(f"// {direction} rows, {len(self.k.loops)} loop(s) over their "
                  f"{'in' if direction == 'dst' else 'out'}-edges")
        self.emit(f"const int64_t* indptr = graph[{csr}]; const int64_t* nbrs = graph[{csr + 1}]; "
                  f"const int64_t* eids = graph[{csr + 2}];")
        for buf, k in self.buffer_index.items():
            self.emit(f"scalar_t* b{k} = (scalar_t*)buffers[{k}];  // {buf}")
        n_rows = "sizes[1]" if self.k.direction is Space.DST else "sizes[0]"
        for line in self.d.row_loop(n_rows):
            self.emit(line)
        self.depth += 1
        self.emit("const int64_t begin = indptr[r], end = indptr[r + 1];")
        self.emit("(void)begin; (void)end;")
        for loop in self.k.loops:
            self.render_loop(loop)
        for buf, i in self.k.row_writes:
            self.require(i)
            self.store(buf, i, "r")
        self.depth -= 1
        self.emit("}")
        self.depth -= 1
        self.emit("}")
        return "\n".join(self.lines)

    def open_edge_loop(self) -> set[int]:
        """Start the loop over the row's edges; returns the values in scope before it."""
        self.emit("for (int64_t j = begin; j < end; ++j) {")
        self.depth += 1
        self.emit("const int64_t nbr = nbrs[j], eid = eids[j];")
        self.emit("(void)nbr; (void)eid;")
        return set(self.ready)

    def render_loop(self, loop):
        sinks = [self.nodes[a].args[0] for a in loop.aggs] + [i for _, i in loop.edge_writes]
        row_level, seen = [], set()

        def collect(i):
            if i in seen or i in self.ready:
                return
            seen.add(i)
            n = self.nodes[i]
            if n.op in AGGREGATIONS:
                if self.is_row_level(i):
                    row_level.append(i)
                return
            for a in n.args:
                collect(a)
            if self.is_row_level(i):
                row_level.append(i)

        for s in sinks:
            collect(s)
        for i in row_level:  # hoisted out of the edge loop: computed once per row
            self.require(i)
        lanes = self.lane_values(loop)
        if lanes is not None:
            return self.render_blocked_loop(loop, lanes)
        for a in loop.aggs:
            n = self.nodes[a]
            self.emit(f"scalar_t v{a}[{n.size}];")
            self.emit(f"for (int i = 0; i < {n.size}; ++i) v{a}[i] = {literal(AGG_START[n.op])};")
        outer = self.open_edge_loop()
        for a in loop.aggs:
            n = self.nodes[a]
            (x,) = n.args
            self.require(x)
            loop_vars, header = self.loop_nest(n.shape)
            idx = flat_index(n.shape, loop_vars, len(n.shape))
            xs = self.access(x, flat_index(self.nodes[x].shape, loop_vars, len(n.shape)))
            self.emit(f"{header} {{ {AGG_UPDATE[n.op].format(acc=f'v{a}[{idx}]', x=xs)} }}".lstrip())
        for buf, i in loop.edge_writes:
            self.require(i)
            self.store(buf, i, "eid")
        self.ready = outer  # per-edge values go out of scope
        self.depth -= 1
        self.emit("}")
        self.finish_aggregations(loop)

    def finish_aggregations(self, loop):
        for a in loop.aggs:
            n = self.nodes[a]
            if n.op is not Op.AGG_SUM:  # over no neighbours max and min are 0, as in PyG
                self.emit(f"if (begin == end) for (int i = 0; i < {n.size}; ++i) v{a}[i] = 0;")
            self.ready.add(a)


def dim_declarations(symbols: list[str]) -> list[str]:
    """The run-time sizes of a shape-generic kernel, by name."""
    return [f"const int64_t {sym} = dims[{int(sym[1:])}]; (void){sym};" for sym in symbols]


def render_program(schedules: dict[str, Schedule], dialect, dtype: str, prefix: str = "") -> str:
    """C source for several scheduled programs (forward and backward): kernels and entry points.

    Each entry is `int seastar_<prefix><name>(sizes, dims, graph, buffers, numels, num_threads)`: it
    checks every buffer's element count against the sizes (and the run-time dims of shape-generic
    kernels), returns 1 + the index of the first wrong one (0 if all are right), then runs its
    kernels in order. `prefix` keeps many programs apart in one translation unit.
    """
    symbols = symbols_of(b.shape for sched in schedules.values() for b in sched.buffers)
    # a namespace per program, so that many (of either dtype) can share one translation unit
    parts = [dialect.preamble, f"namespace seastar_{prefix or 'program'} {{", f"typedef {C_TYPES[dtype]} scalar_t;", ""]
    for name, sched in schedules.items():
        buffer_index = {b.name: k for k, b in enumerate(sched.buffers)}
        calls = []
        for k, kern in enumerate(sched.kernels):
            kernel_name = f"{prefix}{name}_kernel{k}"
            parts.append(KernelRenderer(sched, kern, kernel_name, dialect, buffer_index, symbols).render())
            parts.append("")
            calls.append(f"  {kernel_name}(sizes, dims, graph, buffers, num_threads);")
        checks = []
        for k, b in enumerate(sched.buffers):
            rows = {Space.SRC: "sizes[0]", Space.DST: "sizes[1]", Space.EDGE: "sizes[2]", Space.PARAM: "1"}[b.space]
            # generated:   if (numels[k] != rows * size) return k + 1;  // name
            checks.append(f"  if (numels[{k}] != {rows} * {size_expr(b.shape)}) return {k + 1};  // {b.name}")
        parts.append(f"{dialect.exported}int seastar_{prefix}{name}(const int64_t* sizes, const int64_t* dims, "
                     f"const int64_t* const* graph, void* const* buffers, const int64_t* numels, int num_threads) {{")
        parts.extend("  " + line for line in dim_declarations(symbols))
        parts.extend(checks)
        parts.extend(calls)
        parts.append("  return 0;")
        parts.append("}")
        parts.append("")
    parts.append("}  // namespace")
    return "\n".join(parts)
