from .ops import Op, Space
from .program import Builder, Node, Program, verify

__all__ = ["Op", "Space", "Builder", "Node", "Program", "verify"]
