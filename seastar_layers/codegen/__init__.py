"""Rendering scheduled programs as source: one renderer (cstyle.py), one dialect per target."""
from .cpu import CpuDialect
from .cuda import CudaDialect

TARGETS = {"cpu": CpuDialect(), "cuda": CudaDialect()}
