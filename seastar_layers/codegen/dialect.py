"""What a dialect tells the one renderer (codegen/cstyle.py): everything that differs between a CPU
thread per row and a GPU thread group per row. See docs/adding-a-dialect.md.

The renderer's execution model: a kernel sweeps rows (destinations over their in-edges, or sources
over their out-edges). A row is handled by a *group* of `lanes` threads (1 on the CPU). Every value
of a row or of one of its edges is an array over its feature elements; the group's lanes split the
elements between them (element loops), and a value that other lanes read is followed by a group
sync. Small values of a size known at generation time may instead be *replicated*: every lane
computes all of it and keeps it in registers, and no sync is needed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Storage type of the features per torch dtype name, and the compute type kernels accumulate in.
COMPUTE_TYPE = {"float32": "float32", "float64": "float64", "float16": "float32", "bfloat16": "float32"}


def c_max(exprs: list) -> str:
    """The largest of several int64 C expressions (0 for none)."""
    exprs = [str(e) for e in exprs if str(e) != "0"]
    if not exprs:
        return "0"
    out = exprs[0]
    for e in exprs[1:]:
        out = f"std::max<int64_t>({out}, {e})"
    return out


@dataclass(frozen=True)
class ElementLoop:
    """A loop over the elements of a value that this lane computes.

    open/close: the lines around the body; coords: a C expression per axis of `shape` (unused for
    axes of extent 1); declarations: lines defining coordinate variables, emitted only where the
    body uses them; flat: a variable holding the element's flat index, where the dialect has one."""

    shape: tuple
    open: list[str]
    close: list[str]
    coords: list[str]
    flat: str | None = None
    declarations: dict = field(default_factory=dict)  # coordinate variable -> the line defining it


@dataclass(frozen=True)
class BlockLayout:
    """How a blocked edge loop (accumulators in registers, features outer, edges inner) maps the
    elements of the aggregations' shape to this lane's slots.

    open/close: the loops over blocks (each block is rendered inside them); slots: the register
    accumulators per lane; variants: [(guard opening, slot count expression, guard closing)], the
    block rendered once per variant (the CPU renders full blocks with a constant trip count and
    the tail separately); slot_open/slot_close: around the body for slot k < WIDTH (the variant's
    count), skipping elements at or past SIZE; slot_coords: a C expression per axis for slot k's
    element; slot_flat: a variable holding its flat index, if the layout has one; vector_axis: the
    axis slots run along; block_coords: coordinates of the block with the vector axis at 0, where
    values constant along that axis are computed once per edge, or None to compute every value per
    slot; first_block: a C condition true in the first block along the vector axis, where
    aggregations constant along it accumulate (None: the layout cannot); slot_first: for a layout
    without blocks along that axis (block_coords None), a C condition true for a slot at coordinate
    0 of the vector axis, where such aggregations accumulate per slot; prefetch: coordinates of
    the block's first element, where the dialect prefetches the rows an edge loop gathers a few
    edges ahead (None: it does not).

    A *whole-row* layout (the CPU's, for small (heads, channels) shapes) has no loops outside the
    edge loop: every accumulator of the row is live across it, so each edge is visited once.
    outer_open/outer_close: per edge, a loop over the one outer axis `outer_axis` (heads), where the
    values constant along the vector axis are computed once per outer index, into arrays the slots
    read, and where the aggregations of that axis's shape accumulate; slot_open then loops over both
    axes and slot_index is slot k's accumulator; accumulators: how many the row has (a C
    expression); prefetch_rows: prefetch the whole of each gathered row, not one block of it;
    prefetch_span: the elements of a block to prefetch from its first (None: one cache line).
    edge_batch: in a whole-row layout, how many edges have their per-head values computed, one
    edge after another, before their slots accumulate (0: each edge's slots right after its heads).
    guard: a C condition under which the layout applies, `fallback` the layout otherwise."""

    open: list[str]
    close: list[str]
    slots: int
    variants: list[tuple[str | None, str, str | None]]
    slot_open: list[str]
    slot_close: list[str]
    slot_coords: list[str]
    slot_flat: str | None
    vector_axis: int
    block_coords: list[str] | None
    first_block: str | None = None
    prefetch: list[str] | None = None
    outer_axis: int | None = None
    outer_open: list[str] | None = None
    outer_close: list[str] | None = None
    slot_index: str = "k"
    accumulators: str | None = None
    prefetch_rows: bool = False
    prefetch_span: int | None = None
    edge_batch: int = 0
    guard: str | None = None
    fallback: BlockLayout | None = None
    slot_first: str | None = None


class Dialect:
    """The interface. Methods return C source lines (lists of str) unless they say otherwise."""

    name = "abstract"
    file_suffix = ".cpp"
    inline_function = "static inline"  # how helper functions kernels call are declared
    member_function = "inline"  # and member functions
    # blocked loops compute per-edge reductions over features in a loop of their own before the
    # loop over slots (or heads) that reads them: a loop holding an inner loop stays scalar on the CPU
    split_reductions = False
    # a sweep whose gathered rows overflow a core's cache may run once per chunk of neighbours
    # (cstyle.py: render_source_chunks); the dialect defines seastar_source_chunk(row_bytes)
    source_chunks = False
    # the type of a row's sizes and element indices inside kernels (a row has far fewer than 2^31
    # elements; row and edge offsets stay int64)
    element_index = "int64_t"
    # a softmax's row max taken in the sweep of its sums, which rescale as it rises (passes/schedule.py);
    # rendered where a blocked loop keeps an accumulator per slot (BlockLayout.slot_first)
    online_softmax = False
    # a blocked loop's slot loads each buffer element it reads once, into a named value, rather than
    # where each use reads it (what a GPU's compiler makes of it, and what the emulator then counts)
    name_loads = False
    # a row's edges may be split among the groups of a block (a hub row), which then combine their
    # aggregations' partial results (KernelRenderer.combine_split). Such a dialect's row loop defines
    # `group`, `block_groups` and `row_scratch` (elements between two groups' scratch), row_edges
    # defines `split`, and the edge loops run over edge_range, the row's edges or this group's slice
    # (never empty: the row has no edges where it is empty)
    splits_rows = False
    edge_range = ("begin", "end")
    # the storage dtypes whose kernels get compile's fast paths: each fast path compiles every kernel again,
    # so only the types a target trains in (on a CPU not the half types; nothing trains at scale in them there)
    pinned_dtypes = ("float32", "float64")

    def global_access(self, element: str) -> str:
        """An element of a buffer or graph array, as kernels read or write it (the CUDA dialect marks it
        for the emulator's traffic count)."""
        return element

    def preamble(self, dtype: str) -> str:
        """Includes and helpers before any program; dtype: the storage dtype name."""
        raise NotImplementedError

    def types(self, dtype: str) -> list[str]:
        """typedefs of scalar_t (storage) and acc_t (compute), inside the program's namespace."""
        raise NotImplementedError

    def load(self, expr: str, dtype: str) -> str:
        """A storage-typed element as acc_t."""
        raise NotImplementedError

    def store(self, expr: str, dtype: str) -> str:
        """An acc_t value as the storage type."""
        raise NotImplementedError

    def math(self, function: str, dtype: str) -> str:
        """The spelling of a math function ("exp", "log", ...) on the compute type."""
        raise NotImplementedError

    def literal(self, value: float, dtype: str) -> str:
        raise NotImplementedError

    def kernel_open(self, name: str, params: str, fast: bool = False, dtype: str = "float32") -> list[str]:
        """The kernel function's opening line(s); `fast`: a fast path's kernel (its sizes constant)."""
        raise NotImplementedError

    # whether a kernel's rows are a function of their own (rows_open, rows_loop_open), called by the kernel
    # (rows_call) on one thread or a team's; else the kernel holds the row loop (row_loop_open)
    outlines_rows = False

    def rows_open(self, name: str, params: str, fast: bool = False, dtype: str = "float32") -> list[str]:
        """The opening of the rows' function of kernel `name` (outlines_rows)."""
        raise NotImplementedError

    def rows_loop_open(self) -> list[str]:
        """The loop over the rows' function's rows, defining `r` (outlines_rows)."""
        raise NotImplementedError

    def rows_call(self, name: str, n_rows: str) -> list[str]:
        """Lines that run the rows' function of kernel `name` over rows [0, n_rows) (outlines_rows)."""
        raise NotImplementedError

    def row_loop_open(self, n_rows: str, order: str, uses_scratch: bool, widest: int | None = None,
                      scratch: int | None = None) -> list[str]:
        """Lines that open the loop over this group's rows, defining `r` (and `scratch` if used); `widest`
        and `scratch` (elements a row uses): where generation knows them (a fast path's kernel), else None."""
        raise NotImplementedError

    def row_loop_close(self) -> list[str]:
        raise NotImplementedError

    def replicated(self, size) -> bool:
        """Whether a value of `size` elements (an int, or a C expression) is computed whole by every lane."""
        raise NotImplementedError

    def declare(self, name: str, size, replicated: bool, offset: str | None) -> str:
        """A value's array: `offset` is its place in the row's scratch when it is not a small local array."""
        raise NotImplementedError

    def on_stack(self, size, replicated: bool) -> bool:
        """Whether a value lives in a local array (else in the row's scratch)."""
        raise NotImplementedError

    def element_loop(self, shape, size, replicated: bool) -> ElementLoop:
        raise NotImplementedError

    def sync(self) -> list[str]:
        """A barrier among the lanes of one row's group (none on the CPU)."""
        raise NotImplementedError

    def params_fields(self) -> list[str]:
        """Members the dialect adds to a program's params struct `p` (run_kernels fills them)."""
        return []

    def row_edges(self) -> list[str]:
        """Lines after a row's `begin` and `end` (splits_rows: defining `split` and edge_range)."""
        return []

    def block_sync(self) -> list[str]:
        """A barrier among every thread of a block (splits_rows)."""
        raise NotImplementedError

    def block_element_loop(self, shape, size) -> ElementLoop:
        """An element loop whose elements the block's threads split between them (splits_rows)."""
        raise NotImplementedError

    def prefetch(self, address: str, condition: str, span: str | None = None) -> list[str]:
        """Fetch `address` (and the `span` elements from it, if given) into the cache early where
        `condition` holds (DISTANCE: the dialect's distance in edges); only layouts with
        BlockLayout.prefetch ask."""
        return []

    def block_layout(self, shape: tuple, size: str, accumulators: int = 1, dtype: str = "float32") -> BlockLayout:
        """The layout of a blocked loop over aggregations of `shape` (`size` elements), with
        `accumulators` of them per slot, computing in `dtype`'s compute type."""
        raise NotImplementedError

    def simd(self) -> list[str]:
        """Lines before a loop whose iterations are independent."""
        return []

    def run_kernels(self, kernels: list, params: str) -> list[str]:
        """The entry point's body after the params struct `p` is filled: run or launch the kernels.

        kernels: [(name, n_rows C expression, scratch elements per row C expression,
        widest value C expression)]. Returns 0, or a negative code after recording a message."""
        raise NotImplementedError
