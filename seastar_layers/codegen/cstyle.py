"""One C-like renderer for scheduled programs. A dialect (codegen/cpu.py, codegen/cuda.py) fills in
what differs between targets; this file decides what is computed where.

Every value is an array indexed by its flat feature index: inputs and results of other kernels are
pointers into a buffer row, computed values are arrays (local, or in the row's scratch), constants
are literals. Each elementwise node is an element loop over its shape with broadcasting folded into
the operand index expressions. Kernels take one params struct; the generated entry point checks
every buffer against the sizes, fills the struct and hands it to the dialect to run.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..ir import OPS, BufferKey, Kind, Op, Space
from ..ir.program import size_expr, strides, symbols_of
from ..passes.schedule import Kernel, Loop, Schedule
from .dialect import Dialect, ElementLoop, c_max

# graph[]: in-CSR (indptr, sources, edge ids), out-CSR (indptr, destinations, edge ids), then the
# destination and source rows in the order a dialect should take them (heaviest first; may be null)
GRAPH_SLOTS = 8
_MATH = re.compile(r"\$(\w+)\(")


def flat_index(shape, coords: list[str], out_rank: int) -> str:
    """Index into a value of `shape` broadcast into an output of rank out_rank (right-aligned)."""
    terms = []
    offset = out_rank - len(shape)
    for d, (extent, stride) in enumerate(zip(shape, strides(shape), strict=True)):
        if extent != 1:
            var = coords[d + offset]
            terms.append(var if stride == 1 else f"{var} * {stride}")
    return " + ".join(terms) or "0"


@dataclass
class EdgeBatch:
    """A whole-row edge loop's batch (BlockLayout.edge_batch) while it is rendered: the arrays that
    carry values from its first pass to its second, declared at line `mark` (at `depth`) once the
    first pass is rendered, and the second pass's definitions of the per-edge scalars."""
    size: int
    mark: int = 0
    depth: int = 0
    arrays: list[str] = field(default_factory=list)
    reloads: list[str] = field(default_factory=list)


class KernelRenderer:
    """Renders one kernel of a schedule as a C function of the dialect."""

    def __init__(self, sched: Schedule, kern: Kernel, name: str, dialect: Dialect, dtype: str,
                 buffer_index: dict[BufferKey, int], params: str, pinned: dict[str, int] | None = None,
                 source_chunked: bool = False):
        self.s, self.k, self.name, self.d, self.dtype = sched, kern, name, dialect, dtype
        # rendering the rows' body of a source-chunked sweep (render: source_chunks): the row's
        # aggregations live in `partial` between chunks, and each chunk takes the row's next edges
        self.source_chunked = source_chunked
        self.pinned = pinned or {}  # sizes this kernel takes as constants (a fast path), by symbol
        self.nodes = sched.program.nodes
        self.buffers = {b.key: b for b in sched.buffers}
        self.buffer_index = buffer_index
        self.params = params
        self.lines: list[str] = []
        self.depth = 0
        self.ready: set[int] = set()  # values declared in the current scope chain
        self.stored_typed: set[int] = set()  # values that point into storage-typed buffers
        self.in_buffers: set[int] = set()  # values that point into buffers (global memory), not scratch
        self.replicated: dict[int, bool] = {}
        self.slots: dict[int, str] = {}  # value -> offset in the row's scratch
        self.scratch_sizes: list = []
        self.sizes: list = []  # every value size the kernel handles: the dialect sizes its groups by the widest
        self.block_shape: tuple = ()  # the aggregations' shape in the blocked loop being rendered
        self.shared_in_edge_loop = False  # whether the current edge loop wrote values other lanes read
        self.zero_filled: set[int] = set()  # max and min aggregations whose rows without edges are stored 0 already
        # while a slot's body is rendered (Dialect.name_loads): each buffer element it reads, by the name
        # it was loaded into, and the loads not yet emitted
        self.slot_loads: dict[str, str] | None = None
        self.pending_loads: list[str] = []
        self.edge_ids_at: int | None = None  # the line of the open edge loop that reads its neighbour and edge ids
        self.running: Loop = Loop()  # the loop being rendered, where it takes row maxima online
        self.running_deps: set[int] = set()  # values computed from its running maxima: per edge, not per row

    # helpers -----------------------------------------------------------------------------------
    def emit(self, *lines: str):
        self.lines.extend("  " * self.depth + line for line in lines)


    def access(self, i: int, idx: str) -> str:
        n = self.nodes[i]
        if n.op is Op.CONST:
            return self.d.literal(n.attr("value"), self.dtype)
        element = f"v{i}[{idx}]"
        if i in self.in_buffers:
            element = self.d.global_access(element)
        if i in self.stored_typed:
            return self.d.load(element, self.dtype)
        return element

    def c_expr(self, i: int, operands: list[str], element: str, as_bool: bool = False) -> str:
        """Node i's C expression for one element (`element`: its flat index, which random draws hash);
        as_bool: a comparison's as a C bool."""
        n = self.nodes[i]
        template = _MATH.sub(lambda m: self.d.math(m.group(1), self.dtype) + "(",
                             OPS[n.op].c_bool if as_bool else OPS[n.op].c)
        row = {self.k.row_space: "r", self.k.nbr_space: "nbr", Space.EDGE: "eid"}.get(n.space, "0")
        return template.format(*operands, **dict(n.attrs), row=row, element=element)

    def index_in(self, loop: ElementLoop, shape) -> str:
        if loop.flat is not None and tuple(shape) == loop.shape:
            return loop.flat
        return flat_index(shape, loop.coords, len(loop.shape))

    def is_row_level(self, i: int) -> bool:
        n = self.nodes[i]
        if n.op.kind == Kind.AGGREGATION:
            return i in self.k.aggs or n.space is self.k.row_space
        return n.space in (self.k.row_space, Space.PARAM, Space.CONST)

    def pointer_for(self, i: int) -> str:
        """Where a value read from a buffer starts, for the current row or edge."""
        n = self.nodes[i]
        base = f"b{self.buffer_index[self.s.reads[i]]}"
        row = {self.k.row_space: "r", self.k.nbr_space: "nbr", Space.EDGE: "eid", Space.PARAM: None}[n.space]
        return base if row is None else f"{base} + {row} * {n.size}"

    def declare_value(self, i: int, distributed: bool = False) -> bool:
        """Declare the array of computed value i; returns whether it is replicated across lanes
        (`distributed` forbids it: lanes will write only their own elements)."""
        size = self.nodes[i].size
        self.sizes.append(size)
        replicated = self.d.replicated(size) and not distributed
        offset = None
        if not self.d.on_stack(size, replicated):
            if i not in self.slots:
                self.slots[i] = " + ".join(f"({s})" for s in self.scratch_sizes) or "0"
                self.scratch_sizes.append(size)
            offset = self.slots[i]
        self.emit(self.d.declare(f"v{i}", size, replicated, offset))
        self.replicated[i] = replicated
        self.shared_in_edge_loop |= not replicated
        return replicated

    def for_each(self, shape, size, replicated: bool, body, across_block: bool = False) -> None:
        """An element loop over `shape`; body(loop) returns the statements for one element. across_block:
        the block's threads split the elements (Dialect.block_element_loop), not the group's lanes."""
        loop = (self.d.block_element_loop(tuple(shape), size) if across_block
                else self.d.element_loop(tuple(shape), size, replicated))
        statements = body(loop)
        used = set(re.findall(r"\b\w+\b", " ".join(statements)))
        self.emit(*loop.open)
        self.depth += 1
        self.emit(*(line for var, line in loop.declarations.items() if var in used), *statements)
        self.depth -= 1
        self.emit(*loop.close)

    def sync_after(self, replicated: bool) -> None:
        if not replicated:
            self.emit(*self.d.sync())

    # values ------------------------------------------------------------------------------------
    def require(self, i: int):
        """Emit value i (and what it needs) at the current position, if not already available."""
        if i in self.ready:
            return
        n = self.nodes[i]
        if n.op is Op.CONST:
            return
        from_buffer = self.k.reads_buffer(i, n)
        if n.op.kind == Kind.AGGREGATION and not from_buffer:
            raise AssertionError(f"aggregation %{i} used before its loop ran")
        if not from_buffer:
            for a in n.args:
                self.require(a)
        self.ready.add(i)
        if from_buffer:
            buf = self.buffers[self.s.reads[i]]
            self.in_buffers.add(i)
            if buf.c_type == "scalar_t":
                self.stored_typed.add(i)
            self.emit(f"const {buf.c_type}* v{i} = {self.pointer_for(i)};")
        elif n.op is Op.RESHAPE:
            (x,) = n.args
            if x in self.stored_typed:
                self.stored_typed.add(i)
            if x in self.in_buffers:
                self.in_buffers.add(i)
            self.replicated[i] = self.replicated.get(x, True)
            self.emit(f"const {'scalar_t' if x in self.stored_typed else 'acc_t'}* v{i} = v{x};")
        elif n.op.kind == Kind.REDUCE:
            self.render_reduce(i)
        elif n.op.kind in (Kind.ELEMENTWISE, Kind.SHAPE, Kind.RANDOM) and OPS[n.op].c is not None:
            self.render_elementwise(i)
        else:
            raise NotImplementedError(f"the renderer has no rule for {n.op.name}")

    def render_elementwise(self, i: int):
        n = self.nodes[i]
        replicated = self.declare_value(i)

        def body(loop):
            operands = [self.access(a, self.index_in(loop, self.nodes[a].shape)) for a in n.args]
            index = self.index_in(loop, n.shape)
            return [f"v{i}[{index}] = {self.c_expr(i, operands, index)};"]

        self.for_each(n.shape, n.size, replicated, body)
        self.sync_after(replicated)

    def render_reduce(self, i: int):
        """Each result element sums its operand's elements in row-major order of the reduced axes."""
        n = self.nodes[i]
        (x,) = n.args
        x_shape = self.nodes[x].shape
        axes, keepdim = n.attr("axes"), n.attr("keepdim")
        replicated = self.declare_value(i)

        def body(loop):
            coords, headers, out_axis = [], [], 0
            for d, extent in enumerate(x_shape):
                if d in axes:
                    coords.append(f"j{d}")
                    if extent != 1:
                        headers.append(f"for ({self.d.element_index} j{d} = 0; j{d} < {extent}; ++j{d})")
                    out_axis += keepdim
                else:
                    coords.append(loop.coords[out_axis])
                    out_axis += 1
            term = self.access(x, flat_index(x_shape, coords, len(x_shape)))
            return ["acc_t total = 0;", " ".join(headers + [f"total += {term};"]),
                    f"v{i}[{self.index_in(loop, n.shape)}] = total;"]

        self.for_each(n.shape, n.size, replicated, body)
        self.sync_after(replicated)

    def store(self, key: BufferKey, i: int, row: str):
        n = self.nodes[i]
        buf = self.buffers[key]
        self.sizes.append(n.size)

        def body(loop):
            idx = self.index_in(loop, n.shape)
            value = self.access(i, idx)
            if not buf.in_compute_type:
                value = self.d.store(value, self.dtype)
            return [f"{self.d.global_access(f'b{self.buffer_index[key]}[{row} * {n.size} + {idx}]')} = {value};"]

        self.for_each(n.shape, n.size, False, body)

    # blocked edge loops ------------------------------------------------------------------------
    def blocked_values(self, loop) -> list[int] | None:
        """The per-edge values of a loop, in order, if it can run features-outer.

        A loop whose aggregations share one shape S, and whose per-edge values are elementwise and
        broadcast into S, is rendered as blocks of features with accumulators in registers, the
        edges inside each block (an accumulator in memory costs a load and a store per edge): each
        value is computed for one feature of the block at a time, from its operands at that
        feature's coordinates. Returns None where a per-edge value reduces, reshapes, or has a shape
        that does not broadcast into S."""
        if loop.edge_writes or not loop.aggs:
            return None
        shape = self.block_shape_of(loop)
        if shape is None:
            return None
        order, seen = [], set()

        def available(i) -> bool:  # a constant, a row value, a buffer read or a finished aggregation
            n = self.nodes[i]
            if i in self.running_deps:
                return False
            return (n.op is Op.CONST or i in self.ready or self.is_row_level(i) or self.k.reads_buffer(i, n)
                    or n.op.kind == Kind.AGGREGATION)

        def inlinable(i) -> bool:  # computable inside a reduction's loop, from available values
            n = self.nodes[i]
            return available(i) or (n.op.kind in (Kind.ELEMENTWISE, Kind.RANDOM) and OPS[n.op].c is not None
                                    and all(inlinable(a) for a in n.args))

        def fits(i) -> bool:
            n = self.nodes[i]
            if not broadcasts_into(n.shape, shape):
                return False
            if i in seen or available(i):
                return True
            seen.add(i)
            if n.op.kind == Kind.REDUCE:  # summed per slot, its operand computed inside the sum
                ok = inlinable(n.args[0])
            else:
                ok = n.op.kind in (Kind.ELEMENTWISE, Kind.RANDOM) and OPS[n.op].c is not None
                ok = ok and all(fits(a) for a in n.args)
            if ok:
                order.append(i)
            return ok

        if not all(fits(self.nodes[a].args[0]) for a in loop.aggs):
            return None
        return sorted(order)

    def block_shape_of(self, loop) -> tuple | None:
        """The shape a blocked loop's slots run over: every aggregation's shape, or the widest one if
        the others broadcast into it and stay constant along its slots (then, where the layout
        computes such values once per block, they accumulate there: GAT's per-head sums beside its
        per-head channels). None if the loop cannot be blocked."""
        shapes = [self.nodes[a].shape for a in loop.aggs]
        widest = max(shapes, key=lambda t: (sum(d != 1 for d in t), len(t)))
        if all(d == 1 for d in widest) or not all(broadcasts_into(t, widest) for t in shapes):
            return None
        if any(t != widest for t in shapes):
            layout = self.d.block_layout(widest, str(size_expr(widest)))
            if (layout.first_block is None and layout.slot_first is None
                    or any(varies_along(t, widest, layout.vector_axis) for t in shapes if t != widest)):
                return None
        return widest

    def block_operand(self, i: int, coords: list[str], flat: str | None, names: dict[int, str],
                      condition: bool = False) -> str:
        """Value i at the element of the aggregation's shape whose coordinates are `coords`
        (condition: as the condition of a select, where a comparison stays a C bool)."""
        n = self.nodes[i]
        if n.op is Op.CONST:
            return self.d.literal(n.attr("value"), self.dtype)
        if i in names:
            # anywhere else a comparison is acc_t again: bool / bool would divide integers
            return names[i] if condition or OPS[n.op].c_bool is None else f"(acc_t){names[i]}"
        element = self.access(i, self.block_index(n.shape, coords, flat))
        if self.slot_loads is None or i not in self.in_buffers:
            return element
        if element not in self.slot_loads:  # each element read once per slot: what the GPU loads
            self.slot_loads[element] = f"g{len(self.slot_loads)}"
            self.pending_loads.append(f"const auto {self.slot_loads[element]} = {element};")
        return self.slot_loads[element]

    def with_loads(self, lines: list[str]) -> list[str]:
        """`lines` after the loads their operands named (block_operand)."""
        loads, self.pending_loads = self.pending_loads, []
        return loads + lines

    def block_index(self, shape, coords: list[str], flat: str | None) -> str:
        if flat is not None and tuple(shape) == self.block_shape:
            return flat
        return flat_index(shape, coords, len(self.block_shape))

    def block_value(self, i: int, name: str, coords: list[str], flat: str | None, names: dict[int, str]) -> list[str]:
        """Statements defining `name` as value i at the element with these coordinates."""
        n = self.nodes[i]
        if n.op.kind != Kind.REDUCE:
            operands = [self.block_operand(a, coords, flat, names, condition=n.op is Op.WHERE and k == 0)
                        for k, a in enumerate(n.args)]
            as_bool = OPS[n.op].c_bool is not None
            expr = self.c_expr(i, operands, self.block_index(n.shape, coords, flat), as_bool)
            return self.with_loads([f"const {'bool' if as_bool else 'acc_t'} {name} = {expr};"])
        (x,) = n.args
        x_shape, axes, keepdim = self.nodes[x].shape, n.attr("axes"), n.attr("keepdim")
        out = [coords[len(self.block_shape) - len(n.shape) + t] if extent != 1 else "0"
               for t, extent in enumerate(n.shape)]
        x_coords, headers, out_axis = [], [], 0
        for d, extent in enumerate(x_shape):
            if d in axes:
                x_coords.append(f"r{i}_{d}")
                if extent != 1:
                    headers.append(f"for ({self.d.element_index} r{i}_{d} = 0; r{i}_{d} < {extent}; ++r{i}_{d})")
                out_axis += keepdim
            else:
                x_coords.append(out[out_axis])
                out_axis += 1
        term = self.inline_expr(x, x_coords, len(x_shape))
        return [f"acc_t {name} = 0;", " ".join(headers + [f"{name} += {term};"])]

    def inline_expr(self, i: int, coords: list[str], rank: int, condition: bool = False) -> str:
        """Value i as one C expression at the element with `coords` (of a shape of `rank` axes it
        broadcasts into): computed values are recomputed inline, the others read (condition: as a
        select's condition, where a comparison is a C bool)."""
        n = self.nodes[i]
        if n.op is Op.CONST:
            return self.d.literal(n.attr("value"), self.dtype)
        index = flat_index(n.shape, coords, rank)
        if i in self.ready or self.is_row_level(i) or self.k.reads_buffer(i, n) or n.op.kind == Kind.AGGREGATION:
            return self.access(i, index)
        operands = [self.inline_expr(a, coords, rank, condition=n.op is Op.WHERE and k == 0)
                    for k, a in enumerate(n.args)]
        return self.c_expr(i, operands, index, as_bool=condition and OPS[n.op].c_bool is not None)

    def render_blocked_loop(self, loop, values: list[int]):
        self.block_shape = self.block_shape_of(loop)
        size = str(size_expr(self.block_shape))
        per_slot = sum(self.nodes[a].shape == self.block_shape for a in loop.aggs)
        layout = self.d.block_layout(self.block_shape, size, per_slot, self.dtype)
        if layout.outer_axis is not None and any(
                not varies_along(self.nodes[a].shape, self.block_shape, layout.outer_axis) for a in loop.aggs):
            layout = layout.fallback  # a whole-row layout would add such an aggregation up once per head
        for a in loop.aggs:
            if self.source_chunked:
                self.declare_partial(a)
            else:
                self.declare_value(a, distributed=True)  # each lane stores the features of its own slots
        if layout.guard is None:
            self.render_layout(loop, values, layout, size)
        else:
            self.emit(f"if ({layout.guard}) {{")
            self.depth += 1
            self.render_layout(loop, values, layout, size)
            self.depth -= 1
            self.emit("} else {")
            self.depth += 1
            self.render_layout(loop, values, layout.fallback, size)
            self.depth -= 1
            self.emit("}")
        self.finish_aggregations(loop)

    def render_layout(self, loop, values: list[int], layout, size: str):
        for line in layout.open:
            self.emit(line)
            self.depth += 1
        for guard_open, count, guard_close in layout.variants:
            if guard_open:
                self.emit(guard_open)
            self.render_block(loop, values, layout, count, size)
            if guard_close:
                self.emit(guard_close)
        for line in layout.close:
            self.depth -= 1
            self.emit(line)

    def reachable(self, roots: list[int], values: list[int]) -> set[int]:
        """The values among `values` that `roots` are computed from."""
        values, found, stack = set(values), set(), list(roots)
        while stack:
            i = stack.pop()
            if i in values and i not in found:
                found.add(i)
                stack.extend(self.nodes[i].args)
        return found

    def block_reads(self, values: list[int], loop) -> list[int]:
        """The buffer rows a blocked loop's values read (the rest is computed or ready), in order."""
        found, seen = [], set()

        def visit(i):
            if i in seen or i in self.ready or i in self.running.running:
                return
            seen.add(i)
            n = self.nodes[i]
            if self.k.reads_buffer(i, n) or n.op.kind == Kind.AGGREGATION:
                found.append(i)
                return
            for a in n.args:
                visit(a)

        for i in values:
            for a in self.nodes[i].args:
                visit(a)
        for a in loop.aggs:
            visit(self.nodes[a].args[0])
        return found

    def slot_loop(self, layout, count: str, size: str, body: list[str]):
        self.emit(*(line.replace("WIDTH", count).replace("SIZE", size) for line in layout.slot_open))
        nesting = sum(line.rstrip().endswith("{") for line in layout.slot_open)
        self.depth += nesting
        self.emit(*body)
        self.depth -= nesting
        self.emit(*layout.slot_close)

    def render_block(self, loop, values: list[int], layout, count: str, size: str):
        self.depth += bool(layout.variants[0][0])  # inside the variant's guard
        shape = self.block_shape
        whole_row = layout.outer_open is not None
        per_slot = [a for a in loop.aggs if self.nodes[a].shape == shape]
        per_block = [a for a in loop.aggs if self.nodes[a].shape != shape]  # accumulated in the first block
        # (or, in a layout without blocks along the vector axis, in the slots at its coordinate 0)
        in_slots = per_block if layout.block_coords is None else []
        live = layout.accumulators or layout.slots
        for a in loop.aggs:
            start = self.d.literal(OPS[self.nodes[a].op].start, self.dtype)
            if a in per_block and not whole_row and a not in in_slots:
                self.emit(f"acc_t acc{a} = {start};")
            else:
                self.emit(f"acc_t acc{a}[{layout.slots}]; for (int k = 0; k < {live}; ++k) acc{a}[k] = {start};")
        if self.source_chunked:  # go on from where the row's sums stood after the last chunk
            index = self.block_index(shape, layout.slot_coords, layout.slot_flat)
            self.emit("if (!first) {")
            self.depth += 1
            self.slot_loop(layout, count, size, [f"acc{a}[{layout.slot_index}] = v{a}[{index}];" for a in per_slot])
            self.depth -= 1
            self.emit("}")
        batch = EdgeBatch(layout.edge_batch, len(self.lines), self.depth + 1) if whole_row and layout.edge_batch else None
        outer = self.open_edge_batch(batch) if batch else self.open_edge_loop()
        reads = self.block_reads(values, loop)
        first_read = len(self.lines)
        for i in reads:  # buffer rows of this edge; row values are ready already
            self.require(i)
        last_read = len(self.lines)
        if layout.prefetch is not None:
            # a variant narrower than the layout's block (a narrow row, or a row's last features)
            # fetches its own width: four lines ahead for a 16-float row halved its sweep's speed
            span = layout.prefetch_span
            if span is not None:
                span = min(span, int(count)) if count.isdigit() else count
            self.prefetch_ahead(reads, layout.prefetch, len(shape), layout.prefetch_rows, span, layout.vector_axis)
        # values constant along the block's features are computed once per edge (where the layout allows)
        names: dict[int, str] = {}
        if layout.block_coords is not None:
            # what only the first block's accumulators need is computed in the first block only
            for_slots = self.reachable([self.nodes[a].args[0] for a in per_slot], values)
            once = [i for i in values if not varies_along(self.nodes[i].shape, shape, layout.vector_axis)]
            if whole_row:  # once per head, into arrays for the slots that read them
                per_slot_values = [i for i in values if i in for_slots and i not in once]
                read = {a for i in per_slot_values for a in self.nodes[i].args}
                read |= {self.nodes[a].args[0] for a in per_slot}
                self.render_per_head(per_block, once, [i for i in once if i in read], layout, names, batch)
            else:
                first_only = []
                for i in once:
                    lines = self.block_value(i, f"s{i}", layout.block_coords, None, names)
                    (self.emit(*lines) if i in for_slots else first_only.extend(lines))
                    names[i] = f"s{i}"
                if per_block:
                    self.emit(f"if ({layout.first_block}) {{")
                    self.depth += 1
                    self.emit(*first_only)
                    for a in per_block:
                        x = self.block_operand(self.nodes[a].args[0], layout.block_coords, None, names)
                        self.emit(OPS[self.nodes[a].op].update.format(acc=f"acc{a}", x=x))
                    self.depth -= 1
                    self.emit("}")
        if batch:  # the batch's second pass: each edge's slots, from what the first stored
            self.drop_unread(first_read, last_read)
            self.depth -= 1
            self.emit("}")
            self.lines[batch.mark:batch.mark] = ["  " * batch.depth + line for line in batch.arrays]
            self.emit("for (int64_t jb = 0; jb < batch; ++jb) {")
            self.depth += 1
            self.emit("const int64_t nbr = nbr_of[jb], eid = eid_of[jb];", "(void)nbr; (void)eid;")
            self.ready = set(outer)
            first_read = len(self.lines)
            for i in reads:
                self.require(i)
            last_read = len(self.lines)
            self.emit(*batch.reloads)
        body = []
        if self.d.split_reductions:  # each per slot into an array, in a slot loop of its own
            for i in values:
                if i not in names and self.nodes[i].op.kind == Kind.REDUCE:
                    self.emit(f"acc_t e{i}[{layout.slots}];")
                    self.slot_loop(layout, count, size, self.block_value(i, f"r{i}", layout.slot_coords,
                                                                         layout.slot_flat, names)
                                   + [f"e{i}[{layout.slot_index}] = r{i};"])
                    names[i] = f"e{i}[{layout.slot_index}]"
        running = self.running.running
        for m in running:
            names[m] = f"acc{m}[{layout.slot_index}]"
        if self.d.name_loads:
            self.slot_loads = {}
        # what the maxima read, then the maxima (rescaling their sums), then what reads them
        for after in (False, True):
            if after:
                body += self.take_maxima(layout, names)
            for i in values:
                if i not in names and (i in self.running_deps) == after:
                    body += self.block_value(i, f"e{i}", layout.slot_coords, layout.slot_flat, names)
                    names[i] = f"e{i}"
        for a in [a for a in per_slot + in_slots if a not in running]:
            x = self.block_operand(self.nodes[a].args[0], layout.slot_coords, layout.slot_flat, names)
            update = OPS[self.nodes[a].op].update.format(acc=f"acc{a}[{layout.slot_index}]", x=x)
            body += self.with_loads([f"if ({layout.slot_first}) {update}" if a in in_slots else update])
        self.slot_loads = None
        self.slot_loop(layout, count, size, body)
        if batch:
            self.drop_unread(first_read, last_read)
        self.ready = outer
        self.close_edge_loop()
        if batch:
            self.depth -= 1
            self.emit("}")
        index = self.block_index(shape, layout.slot_coords, layout.slot_flat)
        stores = [f"v{a}[{index}] = acc{a}[{layout.slot_index}];" for a in per_slot]
        for a in in_slots:  # a max or min over no edges is 0 here: other lanes would race to fill it after
            value = f"acc{a}[{layout.slot_index}]"
            if self.nodes[a].op is not Op.AGG_SUM:
                self.zero_filled.add(a)
                value = f"{self.no_edges()} ? (acc_t)0 : {value}"
            stores.append(f"if ({layout.slot_first}) "
                          f"v{a}[{flat_index(self.nodes[a].shape, layout.slot_coords, len(shape))}] = {value};")
        self.slot_loop(layout, count, size, stores)
        for a in per_block:
            if a in in_slots:
                continue
            index = flat_index(self.nodes[a].shape, layout.block_coords, len(shape))
            if whole_row:
                self.emit(*layout.outer_open, f"  v{a}[{index}] = acc{a}[{index}];", *layout.outer_close)
            else:
                self.emit(f"if ({layout.first_block}) v{a}[{index}] = acc{a};")
        self.depth -= bool(layout.variants[0][0])

    def take_maxima(self, layout, names: dict[int, str]) -> list[str]:
        """A slot's step of the running maxima: where this edge's value passes the max, the sums taken
        so far are scaled by exp(degree * (old - new)), then the max moves (a NaN takes it, as the
        max aggregation's update does: the sums turn NaN as exp(x - NaN) would make them)."""
        lines = []
        for m in self.running.running:
            acc = names[m]
            x = self.block_operand(self.nodes[m].args[0], layout.slot_coords, layout.slot_flat, names)
            factor = f"rescale{m}"
            lines += self.with_loads([f"if ({x} > {acc} || {x} != {x}) {{",
                                      f"  const acc_t {factor} = {self.d.math('exp', self.dtype)}({acc} - {x});"])
            for a, (of, degree) in sorted(self.running.rescaled.items()):
                if of == m:
                    lines.append(f"  acc{a}[{layout.slot_index}] *= {' * '.join([factor] * degree)};")
            lines += [f"  {acc} = {x};", "}"]
        return lines

    def render_per_head(self, per_block: list[int], once: list[int], for_slots: list[int], layout, names: dict,
                        batch: EdgeBatch | None = None):
        """A whole-row layout's loops over the outer axis in an edge: the values constant along the
        slots' axis, per outer index, stored for the slots that read them; the aggregations of the
        outer axis's shape accumulate here. In a batch, what the slots read is stored per edge of
        the batch (its arrays and the second pass's reloads are left in `batch`)."""
        # what does not vary along the heads either (a per-edge scalar) once per edge, before them
        for i in [i for i in once if not varies_along(self.nodes[i].shape, self.block_shape, layout.outer_axis)]:
            self.emit(*self.block_value(i, f"s{i}", layout.block_coords, None, names))
            names[i] = f"s{i}"
            if batch:
                c_type = "bool" if OPS[self.nodes[i].op].c_bool is not None else "acc_t"
                batch.arrays.append(f"{c_type} u{i}[{batch.size}];")
                batch.reloads.append(f"const {c_type} s{i} = u{i}[jb];")
                self.emit(f"u{i}[jb] = s{i};")
        head = {i: flat_index(self.nodes[i].shape, layout.block_coords, len(self.block_shape))
                for i in once + per_block}
        reductions = [i for i in once if i not in names and self.d.split_reductions
                      and self.nodes[i].op.kind == Kind.REDUCE]
        rest = [i for i in once if i not in names and i not in reductions]
        # read after the loop computing them: what the slots read, and the reductions the rest reads
        stored = [i for i in for_slots if i not in names] + [i for i in reductions if i not in for_slots]
        stored_at = {i: head[i] for i in stored}
        if batch:  # one row of heads per edge of the batch
            heads = self.block_shape[layout.outer_axis]
            stored_at = {i: f"jb * ({heads}) + {index}" for i, index in stored_at.items()}
            rows = batch.size * (heads if isinstance(heads, int) else layout.slots)
            batch.arrays += [f"acc_t t{i}[{rows}];" for i in stored]
        else:
            self.emit(*(f"acc_t t{i}[{layout.slots}];" for i in stored))
        # reductions in a loop of their own, so that the loop computing the rest vectorises
        for values, updates in ((reductions, []), (rest, per_block)):
            if not values and not updates:
                continue
            self.emit(*layout.outer_open)
            self.depth += 1
            for i in values:
                self.emit(*self.block_value(i, f"s{i}", layout.block_coords, None, names))
                names[i] = f"s{i}"
            for a in updates:
                x = self.block_operand(self.nodes[a].args[0], layout.block_coords, None, names)
                self.emit(OPS[self.nodes[a].op].update.format(acc=f"acc{a}[{head[a]}]", x=x))
            self.emit(*(f"t{i}[{stored_at[i]}] = s{i};" for i in values if i in stored))
            self.depth -= 1
            self.emit(*layout.outer_close)
            names.update({i: f"t{i}[{stored_at[i]}]" for i in values if i in stored})

    def prefetch_ahead(self, reads: list[int], coords: list[str], out_rank: int, whole_rows: bool,
                       span: int | str | None, vector_axis: int):
        """Prefetch this block of the rows (or the whole rows) gathered through the neighbour or
        edge id a few edges ahead. Per-edge values are: edge ids scatter them over the largest
        arrays. A neighbour's value smaller than a cache line is not (N of them stay cached)."""
        for i in reads:
            n = self.nodes[i]
            ids = {self.k.nbr_space: "nbrs", Space.EDGE: "eids"}.get(n.space)
            small = isinstance(n.size, int) and n.size < 16
            if (n.op is not Op.INPUT and i not in self.k.buffered) or ids is None or (ids == "nbrs" and small):
                continue
            base = f"b{self.buffer_index[self.s.reads[i]]}"
            row = f"{base} + {ids}[j + DISTANCE] * {n.size}"
            if whole_rows:
                self.emit(*self.d.prefetch(row, "j + DISTANCE < end", str(n.size)))
                continue
            offset = flat_index(n.shape, coords, out_rank) if len(n.shape) <= out_rank else "0"
            # a block wider than a cache line is fetched whole, where the value runs along the block
            wide = (span is not None and (not isinstance(span, int) or span > 16)
                    and varies_along(n.shape, self.block_shape, vector_axis))
            self.emit(*self.d.prefetch(f"{row} + {offset}", "j + DISTANCE < end", str(span) if wide else None))

    # kernel ------------------------------------------------------------------------------------
    def no_edges(self) -> str:
        """A C condition: the row has no edges (a split row's slices never are empty: Dialect.edge_range)."""
        first, last = self.d.edge_range
        return f"{first} == {last}"

    def open_edge_loop(self) -> set[int]:
        """Start the loop over the row's edges; returns the values in scope before it."""
        self.shared_in_edge_loop = False
        self.emit("for (int64_t j = {0}; j < {1}; ++j) {{".format(*self.d.edge_range))
        self.depth += 1
        self.edge_ids_at = len(self.lines)
        self.emit("const int64_t nbr = nbrs[j], eid = eids[j];", "(void)nbr; (void)eid;")
        return set(self.ready)

    def open_edge_batch(self, batch: EdgeBatch) -> set[int]:
        """Start the loop over the row's edges in batches of `batch.size`, and in it the batch's first
        pass; returns the values in scope before it."""
        self.shared_in_edge_loop = False
        self.edge_ids_at = None
        first, last = self.d.edge_range
        self.emit(f"for (int64_t j0 = {first}; j0 < {last}; j0 += {batch.size}) {{")
        self.depth += 1
        self.emit(f"const int64_t batch = std::min<int64_t>({batch.size}, {last} - j0);",
                  f"int64_t nbr_of[{batch.size}], eid_of[{batch.size}];")
        batch.mark, batch.depth = len(self.lines), self.depth
        self.emit("for (int64_t jb = 0; jb < batch; ++jb) {")
        self.depth += 1
        self.emit("const int64_t j = j0 + jb, nbr = nbrs[j], eid = eids[j];", "nbr_of[jb] = nbr; eid_of[jb] = eid;")
        return set(self.ready)

    def drop_unread(self, start: int, end: int):
        """Drop the row pointers declared in lines[start:end] that no later line reads: each pass of
        an edge batch declares every row the loop gathers, and reads some."""
        for k in reversed(range(start, end)):
            declared = re.match(r"\s*const \w+\* (v\d+) = ", self.lines[k])
            if declared and not any(re.search(rf"\b{declared.group(1)}\b", line) for line in self.lines[k + 1:]):
                del self.lines[k]

    def close_edge_loop(self):
        if self.edge_ids_at is not None:  # read only the ids the loop uses (the emulator counts every load)
            at, body = self.edge_ids_at, " ".join(self.lines[self.edge_ids_at + 2:])
            used = [name for name, ids in (("nbr", "nbrs"), ("eid", "eids")) if re.search(rf"\b{name}\b", body)]
            indent = self.lines[at][:len(self.lines[at]) - len(self.lines[at].lstrip())]
            self.lines[at:at + 2] = ([indent + "const int64_t " + ", ".join(f"{n} = {n}s[j]" for n in used) + ";"]
                                     if used else [])
            self.edge_ids_at = None
        if self.shared_in_edge_loop:  # lanes finish reading this edge's values before the next overwrites them
            self.emit(*self.d.sync())
        self.depth -= 1
        self.emit("}")

    def render_loop(self, loop):
        if loop.running:
            if not self.renders_online(loop):  # the maxima first, in a sweep of their own
                self.render_loop(Loop(list(loop.running)))
                self.render_loop(Loop([a for a in loop.aggs if a not in loop.running], loop.edge_writes))
                return
            self.running = loop
            self.running_deps = self.computed_from(set(loop.running))
        try:
            self.render_sweep(loop)
        finally:
            self.running, self.running_deps = Loop(), set()

    def computed_from(self, maxima: set[int]) -> set[int]:
        """The values computed from `maxima`, up to the aggregations that read them."""
        found: set[int] = set()
        for i, n in enumerate(self.nodes):
            if n.op.kind != Kind.AGGREGATION and any(a in maxima or a in found for a in n.args):
                found.add(i)
        return found

    def renders_online(self, loop) -> bool:
        """Whether `loop` renders as one blocked sweep with an accumulator per slot, which a running
        max needs: every slot keeps its own, so no lane waits for another."""
        if self.source_chunked or self.blocked_values(loop) is None:
            return False
        shape = self.block_shape_of(loop)
        layout = self.d.block_layout(shape, str(size_expr(shape)), 1, self.dtype)
        return (layout.block_coords is None and layout.outer_axis is None and layout.guard is None
                and (layout.slot_first is not None or all(self.nodes[a].shape == shape for a in loop.aggs)))

    def render_sweep(self, loop):
        sinks = [self.nodes[a].args[0] for a in loop.aggs] + [i for _, i in loop.edge_writes]
        row_level, seen = [], set()

        def collect(i):
            if i in seen or i in self.ready:
                return
            seen.add(i)
            n = self.nodes[i]
            if n.op.kind == Kind.AGGREGATION or i in self.k.buffered:
                if self.is_row_level(i) and i not in self.running.running:
                    row_level.append(i)
                return
            for a in n.args:
                collect(a)
            if self.is_row_level(i) and i not in self.running_deps:
                row_level.append(i)

        for s in sinks:
            collect(s)
        for i in row_level:  # hoisted out of the edge loop: computed once per row
            self.require(i)
        values = self.blocked_values(loop)
        if values is not None:
            return self.render_blocked_loop(loop, values)
        # aggregations of several shapes (GAT's backward: (heads, channels) and (heads, 1)): a blocked
        # loop per shape, each sweeping the edges, beats one loop with every value in memory
        shapes = list(dict.fromkeys(self.nodes[a].shape for a in loop.aggs))
        parts = [Loop([a for a in loop.aggs if self.nodes[a].shape == shape]) for shape in shapes]
        if len(parts) > 1 and not loop.edge_writes and all(self.blocked_values(part) is not None for part in parts):
            for part in parts:
                self.render_blocked_loop(part, self.blocked_values(part))
            return
        for a in loop.aggs:
            n = self.nodes[a]
            replicated = self.declare_value(a, distributed=self.d.splits_rows)  # (split rows combine scratch)
            start = self.d.literal(OPS[n.op].start, self.dtype)
            self.for_each(n.shape, n.size, replicated,
                          lambda lp, a=a: [f"v{a}[{self.index_in(lp, self.nodes[a].shape)}] = {start};"])
        outer = self.open_edge_loop()
        for a in loop.aggs:
            n = self.nodes[a]
            (x,) = n.args
            self.require(x)

            def update(lp, a=a, x=x):
                acc = f"v{a}[{self.index_in(lp, self.nodes[a].shape)}]"
                value = self.access(x, self.index_in(lp, self.nodes[x].shape))
                return [OPS[self.nodes[a].op].update.format(acc=acc, x=value)]

            self.for_each(n.shape, n.size, self.replicated[a], update)
        for key, i in loop.edge_writes:
            self.require(i)
            self.store(key, i, "eid")
        self.ready = outer  # per-edge values go out of scope
        self.close_edge_loop()
        self.finish_aggregations(loop)

    def finish_aggregations(self, loop):
        for a in loop.aggs:
            n = self.nodes[a]
            # over no neighbours max and min are 0, as in PyG
            if n.op is not Op.AGG_SUM and a not in self.zero_filled:
                self.emit(f"if ({self.no_edges()}) {{")
                self.depth += 1
                self.for_each(n.shape, n.size, self.replicated[a],
                              lambda lp, a=a: [f"v{a}[{self.index_in(lp, self.nodes[a].shape)}] = 0;"])
                self.depth -= 1
                self.emit("}")
            self.ready.add(a)
        if self.d.splits_rows and loop.aggs:
            self.combine_split(loop)
        if any(not self.replicated[a] for a in loop.aggs):
            self.emit(*self.d.sync())

    def combine_split(self, loop):
        """In a split row (Dialect.splits_rows) each group of the block holds its slice's aggregations:
        they are combined in group order (the same bits every run) into group 0's copy, each element by
        one thread of the block, and every other group copies the result. A sum the online softmax
        rescaled is scaled to the row's max first: group g's part times exp(degree (max_g - max))."""
        rescaled = {a: of for a, of in self.running.rescaled.items() if a in loop.aggs}

        def part(a: int, index: str, g: str) -> str:  # group g's element, from this group's pointer
            offset = "- group * row_scratch" if g == "0" else f"+ ({g} - group) * row_scratch"
            return f"v{a}[{index} {offset}]"

        def block_loop(a: int, body):  # body(loop, element index) for each element of a, across the block
            n = self.nodes[a]
            self.for_each(n.shape, n.size, False, lambda lp: body(lp, self.index_in(lp, n.shape)), across_block=True)

        def rescale(lp, f, a):
            m, degree = rescaled[a]
            top = flat_index(self.nodes[m].shape, lp.coords, len(self.nodes[a].shape))
            return [f"acc_t top = {part(m, top, '0')};",
                    "for (int g = 1; g < block_groups; ++g) {",
                    f"  const acc_t x = {part(m, top, 'g')};",
                    "  " + OPS[self.nodes[m].op].update.format(acc="top", x="x"),
                    "}",
                    "acc_t total = 0;",
                    "for (int g = 0; g < block_groups; ++g) {",
                    f"  const acc_t scale = {self.d.math('exp', self.dtype)}({part(m, top, 'g')} - top);",
                    f"  total += {part(a, f, 'g')} * {' * '.join(['scale'] * degree)};",
                    "}",
                    f"{part(a, f, '0')} = total;"]

        def combine(lp, f, a):
            return [f"acc_t total = {part(a, f, '0')};",
                    "for (int g = 1; g < block_groups; ++g) {",
                    f"  const acc_t x = {part(a, f, 'g')};",
                    "  " + OPS[self.nodes[a].op].update.format(acc="total", x="x"),
                    "}",
                    f"{part(a, f, '0')} = total;"]

        self.emit("if (split) {  // the block's groups swept a slice of the row's edges each")
        self.depth += 1
        self.emit(*self.d.block_sync())
        if rescaled:  # before their maxima are combined
            for a in sorted(rescaled):
                block_loop(a, lambda lp, f, a=a: rescale(lp, f, a))
            self.emit(*self.d.block_sync())
        for a in loop.aggs:
            if a not in rescaled:
                block_loop(a, lambda lp, f, a=a: combine(lp, f, a))
        self.emit(*self.d.block_sync(), "if (group != 0) {")
        self.depth += 1
        for a in loop.aggs:
            n = self.nodes[a]
            self.for_each(n.shape, n.size, False,
                          lambda lp, a=a: [f"v{a}[{self.index_in(lp, self.nodes[a].shape)}] = "
                                           f"{part(a, self.index_in(lp, self.nodes[a].shape), '0')};"])
        self.depth -= 1
        self.emit("}")
        self.depth -= 1
        self.emit("}")

    def render_rows(self) -> list[str]:
        """The row loop's body: one row's work (in a source-chunked sweep, one chunk's)."""
        self.depth = 1
        if self.source_chunked:
            # this chunk's edges of the row: those from its cursor on whose neighbour is below `high`
            # (the last chunk takes the rest), so each edge is added once and in the row's order
            self.emit("const int64_t begin = first ? (int64_t)indptr[r] : cursor[r];",
                      "int64_t end = indptr[r + 1];",
                      "if (!last) {",
                      "  int64_t stop = begin;",
                      "  while (stop < end && nbrs[stop] < high) ++stop;",
                      "  cursor[r] = end = stop;",
                      "}",
                      "if (begin == end && !first && !last) continue;")
        else:
            self.emit("const int64_t begin = indptr[r], end = indptr[r + 1];", "(void)begin; (void)end;",
                      *self.d.row_edges())
        for loop in self.k.loops:
            self.render_loop(loop)
        if self.source_chunked:
            self.emit("if (!last) continue;  // the row's sums are not complete yet")
        if self.d.splits_rows and self.k.row_writes:
            self.emit("if (split && group != 0) continue;  // every group holds the row's results: one writes them")
        for key, i in self.k.row_writes:
            self.require(i)
            self.store(key, i, "r")
        body, self.lines, self.depth = self.lines, [], 0
        return body

    def declare_partial(self, i: int) -> None:
        """Aggregation i of a source-chunked sweep, in the row's part of `partial`."""
        self.sizes.append(self.nodes[i].size)
        offset = self.partial_per_row(self.k.loops[0].aggs.index(i))
        self.emit(f"acc_t* __restrict__ v{i} = partial + r * ({self.partial_per_row()}) + {offset};")
        self.replicated[i] = True

    def partial_per_row(self, before: int | None = None) -> str:
        """Elements of `partial` per row: the sums of the loop's aggregations (with `before`, of the first
        that many: where the next one starts)."""
        return " + ".join(f"({self.nodes[a].size})" for a in self.k.loops[0].aggs[:before]) or "0"

    def gathered_row_bytes(self) -> str | None:
        """Bytes of the neighbour rows the kernel gathers, per neighbour, where it can sweep them in
        chunks of neighbours (source_chunks): one loop whose sums share a shape along one axis
        (blocked, not whole-row), no per-edge writes. None where it cannot."""
        if not self.d.source_chunks or len(self.k.loops) != 1:
            return None
        (loop,) = self.k.loops
        shapes = {self.nodes[a].shape for a in loop.aggs}
        if (loop.edge_writes or not loop.aggs or any(self.nodes[a].op is not Op.AGG_SUM for a in loop.aggs)
                or len(shapes) != 1 or sum(d != 1 for d in shapes.pop()) != 1 or self.blocked_values(loop) is None):
            return None
        gathered = [f"({n.size}) * sizeof({self.buffers[self.s.reads[i]].c_type})" for i, n in enumerate(self.nodes)
                    if n.space is self.k.nbr_space and self.k.reads_buffer(i, n) and i in self.s.reads]
        return " + ".join(gathered) or None

    def render(self) -> tuple[str, str, str, str]:
        """(source, rows C expression, scratch elements per row, widest value) of the kernel."""
        dst = self.k.direction is Space.DST
        row_bytes = self.gathered_row_bytes()
        chunked = None
        if row_bytes is not None:
            chunked = KernelRenderer(self.s, self.k, self.name, self.d, self.dtype, self.buffer_index, self.params,
                                     self.pinned, source_chunked=True).render_rows()
        body = self.render_rows()
        n_rows = "p.num_dst" if dst else "p.num_src"
        fast = bool(self.pinned)
        widest, scratch = self.known(self.sizes, max), self.known(self.scratch_sizes, sum)
        text = "\n".join(body + (chunked or []))
        self.depth = 0
        if self.d.outlines_rows:
            # the rows' body once, in a function of its own that one thread calls for all the rows, or each
            # thread of a team for its share: a small graph's call opens no parallel region
            self.emit(*self.d.rows_open(self.name, self.params, fast=fast, dtype=self.dtype))
            self.prologue(dst, text)
            self.lines.extend("  " + line for line in [*self.d.rows_loop_open(), *body, "}"])
            self.depth = 0
            self.emit("}", "")
            if chunked is None:
                self.emit(*self.d.kernel_open(self.name, self.params, fast=False, dtype=self.dtype))
                self.lines.extend("  " + line for line in self.d.rows_call(self.name, n_rows))
                self.emit("}")
                return self.result(n_rows, scratch, widest)
        self.emit(*self.d.kernel_open(self.name, self.params, fast=fast, dtype=self.dtype))
        self.prologue(dst, text)
        if chunked is None:
            self.row_loop(n_rows, body, bool(self.scratch_sizes), "  ", widest, scratch)
        else:
            self.render_source_chunks(n_rows, "p.num_src" if dst else "p.num_dst", row_bytes, body, chunked)
        self.depth = 0
        self.emit("}")
        return self.result(n_rows, scratch, widest)

    def result(self, n_rows: str, scratch: int | None, widest: int | None) -> tuple[str, str, str, str]:
        return ("\n".join(self.lines), n_rows,
                str(scratch) if scratch is not None else " + ".join(f"({s})" for s in self.scratch_sizes) or "0",
                str(widest) if widest is not None else c_max(sorted({str(s) for s in self.sizes})))

    def prologue(self, dst: bool, text: str):
        """The kernel's opening declarations: its sizes, the graph's arrays and the buffers `text` uses."""
        csr = 0 if dst else 3
        self.depth = 1
        self.emit(f"// {'dst' if dst else 'src'} rows, {len(self.k.loops)} loop(s) over their "
                  f"{'in' if dst else 'out'}-edges")
        self.emit(*dim_declarations(symbols_of(b.shape for b in self.s.buffers), "p.dims", self.pinned,
                                    self.d.element_index))
        self.emit(f"const seastar_indices indptr{{p.graph[{csr}], p.wide_indices}};",
                  f"const seastar_indices nbrs{{p.graph[{csr + 1}], p.wide_indices}};",
                  f"const seastar_indices eids{{p.graph[{csr + 2}], p.wide_indices}};",
                  f"const seastar_indices order{{p.graph[{6 if dst else 7}], p.wide_indices}};",
                  "(void)indptr; (void)nbrs; (void)eids; (void)order;  // not every kernel reads each")
        used = set(re.findall(r"\bb(\d+)\b", text))
        written = set(re.findall(r"\bb(\d+)\[[^\]]*\]\)? = ", text))  # the element, or the dialect's access to it
        for key, k in self.buffer_index.items():
            if str(k) in used:
                # read-only inputs say so: nvcc may then load them through the read-only data path
                ctype = ("" if str(k) in written else "const ") + self.buffers[key].c_type
                self.emit(f"{ctype}* __restrict__ b{k} = ({ctype}*)p.buffers[{k}];  // {key!r}")

    def known(self, sizes: list, combine) -> int | None:
        """combine (max, sum) of element counts where every one is known here (a fast path's kernel, or a
        program of fixed shapes), else None: the dialect then sizes its groups and scratch at run time."""
        values = []
        for size in sizes:
            total = 1
            for factor in str(size).split(" * "):
                value = self.pinned.get(factor, int(factor) if factor.isdigit() else None)
                if value is None:
                    return None
                total *= value
            values.append(total)
        return combine(values, default=0) if combine is max else combine(values)

    def render_source_chunks(self, n_rows: str, n_nbrs: str, row_bytes: str, body: list[str], chunked: list[str]):
        """The row loop of a sweep whose gathered rows overflow a core's cache, once per chunk of
        neighbours whose rows fit it (seastar_source_chunk), so that each chunk's rows are read from
        the cache by every row's edges into it (rows sorted by neighbour make those edges
        consecutive: graph.py). Each row carries its sums (`partial`) and its position among its
        edges (`cursor`) from chunk to chunk, so every sum adds the same terms in the same order as
        the plain loop, which runs where one chunk holds every neighbour or the memory is not there.
        A size class's first call sweeps once to warm the caches, then once per candidate chunk,
        timed, and keeps the fastest for later calls (the sweep only writes what it computes)."""
        uses_scratch = bool(self.scratch_sizes)
        # two chunks were slower than one sweep (16-wide rows of 1.9 MB); rows not sorted by
        # neighbour (another library's layouts, shared: graph.py) would rescan every row per chunk for
        # nothing, and 64 rows spread over the graph tell them apart
        self.emit("static seastar_chunk_tuner tuner;",
                  f"bool sorted = seastar_source_chunk({row_bytes}, 0) < {n_nbrs} / 2 && {n_rows} > 0;",
                  "for (int64_t probe = 0; probe < 64 && sorted; ++probe) {",
                  f"  const int64_t row = probe * {n_rows} / 64;",
                  "  for (int64_t j = indptr[row] + 1; j < indptr[row + 1] && sorted; ++j) "
                  "sorted = nbrs[j - 1] <= nbrs[j];",
                  "}",
                  "acc_t* partial = nullptr;",
                  "int64_t* cursor = nullptr;",
                  "if (sorted) {",
                  f"  partial = (acc_t*)std::malloc(sizeof(acc_t) * (size_t)({self.partial_per_row()}) "
                  f"* (size_t){n_rows});",
                  f"  cursor = (int64_t*)std::malloc(sizeof(int64_t) * (size_t){n_rows});",
                  "}",
                  "const bool chunkable = partial != nullptr && cursor != nullptr;",
                  f"const int64_t size_class = ({row_bytes}) * 64 + (64 - __builtin_clzll((uint64_t){n_nbrs} | 1));",
                  "const int tuned = chunkable && !seastar_chunk_fixed() ? tuner.choice(size_class) : 0;",
                  "const int attempts = tuned < 0 ? seastar_chunk_candidates + 1 : 1;",
                  "double fastest = 0;",
                  "int best = 0;",
                  "for (int attempt = 0; attempt < attempts; ++attempt) {",
                  "  const int candidate = tuned >= 0 ? tuned : (attempt > 0 ? attempt - 1 : 0);",
                  f"  const int64_t chunk = seastar_source_chunk({row_bytes}, candidate);",
                  "  const auto start = std::chrono::steady_clock::now();",
                  f"  if (chunkable && chunk < {n_nbrs}) {{",
                  f"    const int64_t chunks = ({n_nbrs} + chunk - 1) / chunk;",
                  "    for (int64_t c = 0; c < chunks; ++c) {",
                  "      const bool first = c == 0, last = c + 1 == chunks;",
                  "      const int64_t high = (c + 1) * chunk;  // this chunk's neighbours: below high, from the "
                  "last's")
        chunk_scratch = any(re.search(r"\bscratch\b", line) for line in chunked)  # where the sums are in partial
        self.row_loop(n_rows, chunked, chunk_scratch, "        ")
        self.emit("    }", "  } else {")
        if self.d.outlines_rows:
            self.lines.extend("      " + line for line in self.d.rows_call(self.name, n_rows))
        else:
            self.row_loop(n_rows, body, uses_scratch, "      ")
        self.emit("  }",
                  "  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start)"
                  ".count();",
                  "  if (attempt > 0 && (attempt == 1 || seconds < fastest)) { fastest = seconds; best = candidate; }",
                  "}",
                  "if (tuned < 0) tuner.settle(size_class, best);",
                  "std::free(partial);", "std::free(cursor);")

    def row_loop(self, n_rows: str, body: list[str], uses_scratch: bool, indent: str, widest: int | None = None,
                 scratch: int | None = None):
        """The dialect's loop over the rows around `body`, every line indented by `indent`."""
        opening = self.d.row_loop_open(n_rows, "order", uses_scratch, widest, scratch)
        self.lines.extend(indent + line for line in [*opening, *body, *self.d.row_loop_close()])


def index_helpers(dialect: Dialect) -> list[str]:
    """seastar_indices: a graph array of int32 or int64 indices (graph.py: index_dtype), chosen per call.
    One kernel reads both: the branch is the same on every load, so it costs little beside a row of
    features, where templates would compile every kernel twice."""
    return ["struct seastar_indices {",
            "  const void* data;",
            "  bool wide;  // int64, else int32",
            f"  {dialect.member_function} int64_t operator[](int64_t k) const {{",
            f"    return wide ? {dialect.global_access('static_cast<const int64_t*>(data)[k]')}"
            f" : (int64_t){dialect.global_access('static_cast<const int32_t*>(data)[k]')};",
            "  }",
            "};", ""]


def random_helpers(dialect: Dialect) -> list[str]:
    """seastar_uniform: a counter-based uniform draw in [0, 1) of acc_t, from a hash of (seed, draw, row or
    edge, element); both dialects compute the same bits, so CPU and GPU results agree exactly."""
    fn = dialect.inline_function
    return [
        "// splitmix64's finaliser: consecutive counters give independent-looking 64-bit words",
        f"{fn} uint64_t seastar_mix(uint64_t z) {{",
        "  z += 0x9e3779b97f4a7c15ull;",
        "  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;",
        "  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;",
        "  return z ^ (z >> 31);",
        "}",
        f"{fn} acc_t seastar_uniform(uint64_t seed, uint64_t draw, uint64_t row, uint64_t element) {{",
        "  const uint64_t h = seastar_mix(seastar_mix(seastar_mix(seed ^ (draw << 48)) ^ row) ^ element);",
        "  // as many random bits as the mantissa holds, so the result is never 1",
        "  const int bits = sizeof(acc_t) == 4 ? 24 : 53;",
        "  return (acc_t)(h >> (64 - bits)) * ((acc_t)1 / (acc_t)(1ull << bits));",
        "}", ""]


def broadcasts_into(shape, target) -> bool:
    """Whether a value of `shape` broadcasts (right-aligned) into `target` without growing it."""
    if len(shape) > len(target):
        return False
    return all(d in (1, t) for d, t in zip(reversed(shape), reversed(target)))


def varies_along(shape, target, axis: int) -> bool:
    """Whether a value of `shape`, broadcast into `target`, varies along target's `axis`."""
    aligned = axis - (len(target) - len(shape))
    return aligned >= 0 and shape[aligned] != 1


def dim_declarations(symbols: list[str], source: str, pinned: dict[str, int] | None = None,
                     c_type: str = "int64_t") -> list[str]:
    """The sizes of a shape-generic kernel, by name: read at run time, or constants where pinned."""
    pinned = pinned or {}
    cast = "" if c_type == "int64_t" else f"({c_type})"
    return [f"const {c_type} {sym} = {pinned[sym] if sym in pinned else f'{cast}{source}[{int(sym[1:])}]'}; "
            f"(void){sym};" for sym in symbols]


def render_program(schedules: dict[str, Schedule], dialect: Dialect, dtype: str, prefix: str = "",
                   pins: tuple = ()) -> str:
    """Source for several scheduled programs (forward and backward) of one dtype: kernels and entries.

    Each entry is `int seastar_<prefix><name>(sizes, dims, graph, buffers, numels, num_threads, stream)`:
    it checks every buffer's element count against the sizes (and the run-time dims of shape-generic
    kernels) and returns 1 + the index of the first wrong one; else it runs its kernels in order and
    returns 0, or a negative code whose message `seastar_<prefix>last_error()` returns. `prefix` keeps
    many programs apart in one translation unit. `pins` are fast paths, ((symbol, size), ...) each:
    the kernels again with those sizes as constants, which the entry runs when the sizes match.
    """
    symbols = symbols_of(b.shape for sched in schedules.values() for b in sched.buffers)
    fast_paths = [dict(pin) for pin in pins if dtype in dialect.pinned_dtypes and {s for s, _ in pin} <= set(symbols)]
    namespace = f"seastar_{prefix or 'program'}"
    # a namespace per program, so that many (of any dtype) can share one translation unit
    parts = [dialect.preamble(dtype), f"namespace {namespace} {{", *dialect.types(dtype), "",
             # not thread_local: emulated CUDA kernels run in fibers whose thread-local storage is reset
             "static const char* last_error = \"\";",
             "static int seastar_fail(int code, const char* message) { last_error = message; return code; }", "",
             *index_helpers(dialect)]
    if any(n.op is Op.UNIFORM for sched in schedules.values() for n in sched.program.nodes):
        parts += random_helpers(dialect)
    for name, sched in schedules.items():
        buffer_index = {b.key: k for k, b in enumerate(sched.buffers)}
        params = f"{name}_params"
        parts += [f"struct {params} {{",
                  "  int64_t num_src, num_dst, num_edges;",
                  f"  int64_t dims[{max(len(symbols), 1)}];",
                  f"  const void* graph[{GRAPH_SLOTS}];",
                  "  bool wide_indices;  // the graph's arrays hold int64, else int32",
                  f"  void* buffers[{max(len(sched.buffers), 1)}];",
                  "  acc_t* scratch;  // the CPU's per-thread rows of scratch",
                  "  int64_t scratch_per_row;  // elements of scratch one row uses",
                  "  int num_threads;",
                  "  int lanes;  // threads per row",
                  *("  " + line for line in dialect.params_fields()),
                  "};", ""]
        kernels = {}  # per fast path (then the generic one, {}): (name, rows, scratch, widest) per kernel
        for j, pinned in [*enumerate(fast_paths), (None, {})]:
            kernels[j] = []
            for k, kern in enumerate(sched.kernels):
                kernel_name = f"{prefix}{name}_kernel{k}" + ("" if j is None else f"_fast{j}")
                source, n_rows, scratch, widest = KernelRenderer(sched, kern, kernel_name, dialect, dtype,
                                                                 buffer_index, params, pinned).render()
                parts += [source, ""]
                kernels[j].append((kernel_name, n_rows, scratch, widest))
        checks = []
        for k, b in enumerate(sched.buffers):
            rows = {Space.SRC: "sizes[0]", Space.DST: "sizes[1]", Space.EDGE: "sizes[2]", Space.PARAM: "1"}[b.rows]
            # generated:   if (numels[k] != rows * size) return k + 1;  // key [shape]
            # (the shape in the comment makes two interfaces with the same arithmetic two sources, two ops)
            checks.append(f"  if (numels[{k}] != {rows} * {size_expr(b.shape)}) return {k + 1};  // {b.key!r} "
                          f"{list(b.shape)}")
        parts.append(f'extern "C" int seastar_{prefix}{name}(const int64_t* sizes, const int64_t* dims, '
                     f"const void* const* graph, void* const* buffers, const int64_t* numels, int num_threads, "
                     f"void* stream) {{")
        parts += ["  " + line for line in dim_declarations(symbols, "dims")]
        parts += checks
        parts += [f"  {params} p;",
                  "  p.num_src = sizes[0]; p.num_dst = sizes[1]; p.num_edges = sizes[2];",
                  f"  for (int k = 0; k < {len(symbols)}; ++k) p.dims[k] = dims[k];",
                  f"  for (int k = 0; k < {GRAPH_SLOTS}; ++k) p.graph[k] = graph[k];",
                  "  p.wide_indices = sizes[3] == 8;",
                  f"  for (int k = 0; k < {len(sched.buffers)}; ++k) p.buffers[k] = buffers[k];",
                  "  p.num_threads = num_threads; p.lanes = 1; p.scratch = nullptr; p.scratch_per_row = 0;",
                  "  (void)stream;"]
        for j, pinned in enumerate(fast_paths):
            matches = " && ".join(f"{sym} == {size}" for sym, size in pinned.items())
            parts.append(f"  if ({matches}) {{  // fast path {j}")
            parts += ["    " + line for line in dialect.run_kernels(kernels[j], params)]
            parts.append("  }")
        parts += ["  " + line for line in dialect.run_kernels(kernels[None], params)]
        parts += ["}", ""]
    parts += [f'extern "C" const char* seastar_{prefix}last_error() {{ return last_error; }}', "",
              f"}}  // namespace {namespace}"]
    return "\n".join(parts)
