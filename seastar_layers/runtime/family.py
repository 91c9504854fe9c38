"""An op family: one layer's vertex program with its options, one torch op (`torch.ops.seastar_layers.<name>`):
its schema here, its generated C++ entry points codegen/torch_entry.py's, its Python side library.py's."""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import Tensor

from ..base import COMPUTE_DTYPE, DTYPES
from . import library


@dataclass(frozen=True)
class OpFamily:
    """A layer's vertex program and its options: one op.

    build(**flags, **params) returns the program for one set of options; an optional feature
    given turns its flag on, an optional parameter given is passed (else None), and a switch (a
    bool argument of the op, e.g. with_attention: an extra result) is a flag by itself.
    `seeded_by` names the optional parameter whose variants draw random numbers: the op then takes
    a seed. The program declares its feature shapes (sl.compile's
    shapes=), so one kernel per options and dtype serves every size. `example` gives a full shape
    (rows first) per feature, for compiling: its sizes do not matter, only which rows it has."""

    build: Callable
    required: tuple[str, ...]
    optional: tuple[tuple[str, str], ...]  # (feature, the flag of `build` that reads it)
    params: tuple[str, ...]
    example: dict[str, tuple]
    switches: tuple[str, ...] = ()
    optional_params: tuple[str, ...] = ()
    seeded_by: str | None = None
    dtypes: tuple[torch.dtype, ...] = DTYPES

    @property
    def name(self) -> str:
        return self.build.__name__

    @functools.cached_property  # the properties below are read on every call of the op
    def optional_arguments(self) -> tuple[str, ...]:
        """The op's optional tensor arguments, in schema order: features, parameters, the seed."""
        return (tuple(feature for feature, _ in self.optional) + self.optional_params
                + (("seed",) if self.seeded_by else ()))

    @functools.cached_property
    def arguments(self) -> tuple[str, ...]:
        """The op's tensor arguments after the graph, in schema order."""
        return self.required + self.params + self.optional_arguments

    def is_feature(self, name: str) -> bool:
        """A feature (rows of vertices or edges), else a 0-d parameter or the seed."""
        return name not in self._not_features

    @functools.cached_property
    def _not_features(self) -> frozenset[str]:
        return frozenset(self.params + self.optional_params + ("seed",))

    @functools.cached_property
    def options(self) -> tuple[str, ...]:
        """What selects a variant besides the dtype, in schema order."""
        return tuple(feature for feature, _ in self.optional) + self.optional_params + self.switches

    def schema(self) -> str:
        args = [f"Tensor {n}" for n in self.required + self.params]
        args += [f"Tensor? {f}=None" for f in self.optional_arguments] + [f"bool {s}=False" for s in self.switches]
        return f"{self.name}(Tensor[] graph, {', '.join(args)}) -> (Tensor[], Tensor[])"

    def backward_schema(self) -> str:
        args = [f"Tensor {n}" for n in self.required + self.params]
        args += [f"Tensor? {f}" for f in self.optional_arguments] + [f"bool {s}" for s in self.switches]
        return f"{self.name}_backward(Tensor[] graph, {', '.join(args)}, Tensor[] saved, Tensor[] grads) -> Tensor[]"

    def split(self, args) -> tuple[dict[str, Tensor], tuple[str, ...]]:
        """The op's arguments after the graph as (tensors given by name, options on). The dispatcher
        drops trailing arguments left at their default, so `args` may be short."""
        args = list(args) + [None] * (len(self.arguments) + len(self.switches) - len(args))
        tensors = {name: t for name, t in zip(self.arguments, args) if t is not None}
        on = {s for s, flag in zip(self.switches, args[len(self.arguments):]) if flag}
        return tensors, tuple(o for o in self.options if o in tensors or o in on)

    def program(self, options: Iterable[str], dtype: torch.dtype):
        """The program for these options (parameters are placeholders: the op takes them as inputs)."""
        options = set(options)
        flags = {flag: feature in options for feature, flag in self.optional}
        flags.update((s, s in options) for s in self.switches)
        placeholders = {p: torch.zeros((), dtype=COMPUTE_DTYPE[dtype]) for p in self.params}
        placeholders.update((p, torch.zeros((), dtype=COMPUTE_DTYPE[dtype]) if p in options else None)
                            for p in self.optional_params)
        return self.build(**flags, **placeholders)

    def examples(self, options: Iterable[str], dtype: torch.dtype) -> dict[str, Tensor]:
        names = self.required + tuple(feature for feature, _ in self.optional if feature in options)
        return {n: torch.zeros(self.example[n], dtype=dtype) for n in names}

    def variants(self, dtypes: Iterable[torch.dtype] | None = None):
        """(options, dtype, program, example features) for every specialisation: each subset of
        the options, in every dtype (or in `dtypes`)."""
        for dtype in self.dtypes if dtypes is None else dtypes:
            for count in range(len(self.options) + 1):
                for options in itertools.combinations(self.options, count):
                    yield options, dtype, self.program(options, dtype), self.examples(options, dtype)

    def __call__(self, graph, **tensors) -> list[Tensor]:
        """The program's results on `graph` (a seastar_layers.Graph) for these features, parameters
        and switches."""
        return library.call(self, graph, **tensors)
