from .ops import OPS, Kind, Op, Space
from .program import Builder, BufferKey, Node, Program, Role, verify

__all__ = ["OPS", "Kind", "Op", "Space", "Builder", "BufferKey", "Node", "Program", "Role", "verify"]
