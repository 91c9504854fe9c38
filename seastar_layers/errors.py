"""Exceptions raised to users. Compiler errors point at the user's source line."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLocation:
    filename: str
    lineno: int
    col: int
    line: str

    def render(self) -> str:
        caret = " " * self.col + "^"
        return f'File "{self.filename}", line {self.lineno}, col {self.col}\n    {self.line}\n    {caret}'


class CompileError(Exception):
    """A vertex program uses something outside the language, or its shapes do not fit.

    ``str(err)`` names the construct and shows the offending line with a caret.
    """

    def __init__(self, message: str, location: SourceLocation | None = None):
        self.message = message
        self.location = location
        super().__init__(message if location is None else f"{location.render()}\n{message}")


class IRError(Exception):
    """Raised inside the IR builder; the frontend re-raises it as a CompileError at the user's line."""


class BuildError(RuntimeError):
    """The system C++ compiler failed on generated source (a bug in seastar_layers, not in user code)."""


class UnstabilisedSoftmaxWarning(UserWarning):
    """A program sums exponentials over a neighbourhood in a form the compiler cannot shift by the row
    max; its kernel computes exp as written and overflows on large arguments. The message shows the line."""
