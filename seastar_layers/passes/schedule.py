"""schedule: cut a program into fused kernels.

A kernel is one sweep over rows: destination rows over their in-edges (direction dst), or source
rows over their out-edges (direction src, used by backward programs). Inside a row, a kernel makes
as many passes ("loops") over the row's edges as its aggregations need: GAT's max, then its sum and
weighted sum, are two loops of one kernel; with online_softmax (a dialect's choice) one, the sums
rescaled whenever the running max rises. Edge values are recomputed in each loop that needs
them rather than stored. Kernels are numbered so that dst sweeps are even and src sweeps odd; an
aggregation goes to the first kernel of its direction that comes after every aggregation of the
other direction it depends on. Aggregation results read by another kernel go through a buffer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import BufferKey, Kind, Op, Program, Role, Space
from .softmax import scaling_degrees

# Roles whose buffers hold the kernel's compute type (float32 for half-precision programs): values the
# kernels exchange among themselves, parameters, degrees and parameter gradients' per-row partials.
ACCUMULATOR_ROLES = {Role.PARAM, Role.DEGREE, Role.SAVED, Role.TEMP}


@dataclass(frozen=True)
class Buffer:
    """One tensor the kernels read or write: one row per vertex or edge of `rows` (one row for
    parameters), each of `shape`."""

    key: BufferKey
    shape: tuple
    is_input: bool = False  # read by the kernels (else written)

    @property
    def role(self) -> Role:
        return self.key.role

    @property
    def rows(self) -> Space:
        return self.key.bucket or self.key.space

    @property
    def c_type(self) -> str:
        """The element type kernels see: the features' storage type, the compute type, or int64."""
        if self.role is Role.SEED:
            return "int64_t"
        return "acc_t" if self.in_compute_type else "scalar_t"

    @property
    def in_compute_type(self) -> bool:
        """Held in the kernel's compute type rather than the features' storage type."""
        return self.role in ACCUMULATOR_ROLES or (self.role is Role.GRADIENT and self.key.space is Space.PARAM)


@dataclass
class Loop:
    aggs: list[int] = field(default_factory=list)
    edge_writes: list[tuple[BufferKey, int]] = field(default_factory=list)  # (buffer, node)
    # an online softmax (schedule: online_softmax): row maxima this loop takes as it goes, and the sums
    # scaled by exp(degree * (old max - new max)) each time one rises, {sum: (max, degree)}
    running: list[int] = field(default_factory=list)
    rescaled: dict[int, tuple[int, int]] = field(default_factory=dict)


@dataclass
class Kernel:
    direction: Space  # DST: rows are destinations; SRC: rows are sources
    loops: list[Loop] = field(default_factory=list)
    row_writes: list[tuple[BufferKey, int]] = field(default_factory=list)  # (buffer, node)
    aggs: set[int] = field(default_factory=set)
    buffered: set[int] = field(default_factory=set)  # values an earlier kernel computed, read from its buffer

    def reads_buffer(self, i: int, node) -> bool:
        """Whether value i (`node`) is read from a buffer rather than computed in this kernel."""
        return node.op is Op.INPUT or (node.op.kind == Kind.AGGREGATION and i not in self.aggs) or i in self.buffered

    @property
    def row_space(self) -> Space:
        return self.direction

    @property
    def nbr_space(self) -> Space:
        return Space.SRC if self.direction is Space.DST else Space.DST


@dataclass
class Schedule:
    program: Program
    kernels: list[Kernel]
    buffers: list[Buffer]
    reads: dict[int, BufferKey]  # node id -> buffer it is read from (inputs, and results of other kernels)
    constant_outputs: dict[BufferKey, float]  # outputs that are a constant everywhere (filled by the runtime)

    def __str__(self) -> str:
        lines = []
        for k, kern in enumerate(self.kernels):
            lines.append(f"  kernel {k}: {kern.direction.value} rows")
            for j, loop in enumerate(kern.loops):
                lines.append(f"    loop {j}: aggregates {['%' + str(a) for a in loop.aggs]}"
                             f" writes per edge {[b for b, _ in loop.edge_writes]}")
            lines.append(f"    writes per row {[f'{b!r}=%{n}' for b, n in kern.row_writes]}")
        lines.append("  buffers: " + ", ".join(f"{b.key!r}{list(b.shape)}" for b in self.buffers))
        return "\n".join(lines)


def _first_kernel(direction: Space, same: int, other: int) -> int:
    """Smallest index of `direction`'s parity that is >= same and > other."""
    parity = 0 if direction is Space.DST else 1
    k = max(same, other + 1, 0)
    return k if k % 2 == parity else k + 1


def _evaluated(nodes, kernel_of: dict[int, int], roots: list[int], k: int) -> set[int]:
    """The values kernel k computes itself to reach `roots`: everything up to aggregations of
    other kernels (read from their buffers)."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        i = stack.pop()
        if i in seen or (nodes[i].op.kind == Kind.AGGREGATION and kernel_of[i] != k):
            continue
        seen.add(i)
        stack.extend(nodes[i].args)
    return seen


# For comparing the sizes of values whose shapes hold run-time sizes: a typical heads or channels count.
RUN_TIME_SIZE = 8


def _elements(shape: tuple) -> int:
    out = 1
    for d in shape:
        out *= d if isinstance(d, int) else RUN_TIME_SIZE
    return out


def _row_reads(nodes, kernel_of: dict[int, int], i: int, k: int) -> set[int]:
    """What kernel k reads from buffers to compute value i: inputs and other kernels' aggregations."""
    reads, seen, stack = set(), set(), [i]
    while stack:
        j = stack.pop()
        if j in seen:
            continue
        seen.add(j)
        n = nodes[j]
        if n.op is Op.INPUT or (n.op.kind == Kind.AGGREGATION and kernel_of[j] != k):
            reads.add(j)
        else:
            stack.extend(n.args)
    return reads


def _materialise_neighbour_values(nodes, kernel_of: dict[int, int], writes: dict[int, list], n_kernels: int,
                                  kernel_for_output) -> dict[int, int]:
    """Values of the rows at the other end of a kernel's edges (its neighbours) that it would compute
    per edge, where an earlier kernel sweeping those rows can compute them once per row: {value: that
    kernel}. The consumer then reads the value per edge instead of what it is computed from. Taken
    are the largest such expressions (those an edge value reads), and only where they are no larger
    than the neighbour inputs they are made of: GAT's backward over source rows reads, per edge, the
    destination's gradient already scaled by 1 / total and masked (one row instead of the gradient,
    the total and the degree, and no division per edge and head), and sum(g * out) per destination
    (H values instead of two H x C rows). Only a kernel that exists anyway computes them: a sweep
    added for them would cost more than it saves. They are the same expressions in the same order,
    so the values read are the values that would have been computed, bit for bit."""
    existing = set(kernel_of.values()) | set(writes)
    chosen: dict[int, int] = {}
    for k in range(n_kernels):
        neighbours = Space.DST if k % 2 else Space.SRC  # the rows at the other end of kernel k's edges
        roots = [nodes[a].args[0] for a, ka in kernel_of.items() if ka == k] + [i for _, i, _ in writes.get(k, [])]
        evaluated = _evaluated(nodes, kernel_of, roots, k)
        read_by_edges = {a for i in evaluated if nodes[i].space is not neighbours for a in nodes[i].args}
        for i in sorted(read_by_edges & evaluated):
            n = nodes[i]
            if n.space is not neighbours or n.op is Op.INPUT or n.op.kind == Kind.AGGREGATION or i in chosen:
                continue
            p = kernel_for_output(i, neighbours)
            if p < k and p in existing and _elements(n.shape) <= sum(_elements(nodes[j].shape) for j in
                                                                      _row_reads(nodes, kernel_of, i, k)):
                chosen[i] = p
    return chosen


def _upstream(nodes, roots, stop) -> set[int]:
    """The values `roots` are computed from, not looking past aggregations or the values in `stop`."""
    seen, stack = set(), list(roots)
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        if i not in stop and (nodes[i].op.kind != Kind.AGGREGATION or i in roots):
            stack.extend(nodes[i].args)
    return seen


def _row_maxima(prog: Program) -> dict[int, list[int]]:
    """The maxima stabilise_softmax subtracted: {row max: the stabilised exponentials it shifts}."""
    nodes, found = prog.nodes, {}
    for e, n in enumerate(nodes):
        if n.op is Op.EXP and n.attr("stabilised"):
            maxima = [i for i in _upstream(nodes, [e], set()) if i != e and nodes[i].op.kind == Kind.AGGREGATION]
            if len(maxima) == 1 and nodes[maxima[0]].op is Op.AGG_MAX and nodes[maxima[0]].attr("stop_gradient"):
                found.setdefault(maxima[0], []).append(e)
    return found


def _merge_online(prog: Program, first: Loop, second: Loop, maxima: dict[int, list[int]]) -> Loop | None:
    """`second` with `first`'s row maxima taken online, or None where that would not be exact: each
    sum of `second` that reads a max does so only through its stabilised exponentials, scaled by a
    degree of 1 or 2 (exp(x - m) for the running m is the final one's times exp(m_final - m)), and
    nothing else of `second` reads a max."""
    nodes = prog.nodes
    if first.edge_writes or not first.aggs or any(a not in maxima for a in first.aggs):
        return None
    exps = {e for a in first.aggs for e in maxima[a]}
    if any(set(first.aggs) & _upstream(nodes, [i], set()) for _, i in second.edge_writes):
        return None
    rescaled, degrees = {}, {}
    for a in second.aggs:
        operand = nodes[a].args[0]
        read = set(first.aggs) & _upstream(nodes, [operand], set())
        if not read:
            continue
        if len(read) > 1 or nodes[a].op is not Op.AGG_SUM or set(first.aggs) & _upstream(nodes, [operand], exps):
            return None
        (m,) = read
        if m not in degrees:
            degrees[m] = scaling_degrees(prog, set(maxima[m]))
        degree = degrees[m] and degrees[m][operand]
        if degree not in (1, 2):
            return None
        rescaled[a] = (m, int(degree))
    return Loop(sorted(first.aggs + second.aggs), second.edge_writes, list(first.aggs), rescaled)


def _take_maxima_online(prog: Program, kern: Kernel, maxima: dict[int, list[int]]) -> None:
    """Fold each loop that only takes row maxima (`_row_maxima`) into the next loop, where _merge_online allows."""
    j = 0
    while j + 1 < len(kern.loops):
        merged = _merge_online(prog, kern.loops[j], kern.loops[j + 1], maxima)
        if merged is not None:
            kern.loops[j:j + 2] = [merged]
        j += 1


def schedule(prog: Program, online_softmax: bool = False) -> Schedule:
    """Outputs are written to the rows their keys name (DST/SRC rows, or EDGE for per-edge outputs).
    online_softmax: a softmax's row max is taken in the same sweep as its sums (_merge_online)."""
    nodes = prog.nodes
    maxima = _row_maxima(prog) if online_softmax else {}
    latest = {Space.DST: [-1] * len(nodes), Space.SRC: [-1] * len(nodes)}  # last kernel of each direction needed
    kernel_of: dict[int, int] = {}
    for i, n in enumerate(nodes):
        for d in latest:
            latest[d][i] = max((latest[d][a] for a in n.args), default=-1)
        if n.op.kind == Kind.AGGREGATION:
            to = Space(n.attr("to"))
            other = Space.SRC if to is Space.DST else Space.DST
            k = _first_kernel(to, latest[to][i], latest[other][i])
            kernel_of[i] = k
            latest[to][i] = k

    def kernel_for_output(i: int, space: Space) -> int:
        direction = Space.SRC if space is Space.SRC else Space.DST
        other = Space.SRC if direction is Space.DST else Space.DST
        return _first_kernel(direction, latest[direction][i], latest[other][i])

    buffers: list[Buffer] = []
    reads: dict[int, BufferKey] = {}
    for i, n in enumerate(nodes):
        if n.op is Op.INPUT:
            buffers.append(Buffer(n.attr("key"), n.shape, is_input=True))
            reads[i] = n.attr("key")

    writes: dict[int, list] = {}
    constant_outputs = {}
    for key, i in prog.outputs:
        buf = Buffer(key, nodes[i].shape)
        buffers.append(buf)
        if nodes[i].space is Space.CONST:
            constant_outputs[key] = nodes[i].attr("value")
            continue
        writes.setdefault(kernel_for_output(i, buf.rows), []).append((key, i, buf.rows))

    n_kernels = max(list(kernel_of.values()) + list(writes) + [0]) + 1
    # written by a kernel before the one that reads them: the kernel count stays
    materialised = _materialise_neighbour_values(nodes, kernel_of, writes, n_kernels, kernel_for_output)
    for i, p in materialised.items():
        buf = Buffer(BufferKey(Role.TEMP, str(i), nodes[i].space), nodes[i].shape)
        buffers.append(buf)
        writes.setdefault(p, []).append((buf.key, i, buf.rows))
        reads[i] = buf.key
    kernels = [Kernel(Space.DST if k % 2 == 0 else Space.SRC) for k in range(n_kernels)]
    for i, k in kernel_of.items():
        kernels[k].aggs.add(i)

    # Loops inside each kernel: an aggregation runs in the loop after every same-kernel aggregation
    # its operand depends on.
    needed_elsewhere: set[int] = set()
    for k, kern in enumerate(kernels):
        stage: dict[int, int] = {}

        def stage_of(i: int) -> int:
            if i in stage:
                return stage[i]
            n = nodes[i]
            if n.op.kind == Kind.AGGREGATION and i not in kern.aggs:
                needed_elsewhere.add(i)
                s = 0
            elif materialised.get(i, k) < k:  # read from the row buffer an earlier kernel wrote
                kern.buffered.add(i)
                s = 0
            elif n.op.kind == Kind.AGGREGATION:
                s = stage_of(n.args[0]) + 1
            else:
                s = max((stage_of(a) for a in n.args), default=0)
            stage[i] = s
            return s

        def loop(j: int) -> Loop:
            while len(kern.loops) <= j:
                kern.loops.append(Loop())
            return kern.loops[j]

        for a in sorted(kern.aggs):
            loop(stage_of(nodes[a].args[0])).aggs.append(a)
        for key, i, rows in writes.get(k, []):
            if rows is Space.EDGE:
                loop(stage_of(i)).edge_writes.append((key, i))
            else:
                stage_of(i)
                kern.row_writes.append((key, i))
        if maxima:
            _take_maxima_online(prog, kern, maxima)

    written = {i: buf for buf in buffers for key, i in prog.outputs if key == buf.key}
    for i in sorted(needed_elsewhere):
        buf = written.get(i)
        if buf is None or buf.rows is not nodes[i].space:
            buf = Buffer(BufferKey(Role.TEMP, str(i), nodes[i].space), nodes[i].shape)
            buffers.append(buf)
            kernels[kernel_of[i]].row_writes.append((buf.key, i))
        reads[i] = buf.key
    kernels = [k for k in kernels if k.loops or k.row_writes]
    return Schedule(prog, kernels, buffers, reads, constant_outputs)
