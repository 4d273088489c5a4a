"""The one exception type the core lets cross a layer for bad input."""

from __future__ import annotations


class InputError(Exception):
    """Input that cannot be read as what it claims to be (a file, a document, a Kubernetes object, a quantity).

    ``where`` locates the problem (a file and document, or a field path) and is prepended to the message when
    the error is shown, so adapters can add context on the way out without losing the original reason.
    """

    def __init__(self, message: str, *, where: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.where = where

    def located(self, where: str) -> InputError:
        """A copy of this error with ``where`` put in front of the existing location."""
        combined = f"{where}: {self.where}" if self.where else where
        return InputError(self.message, where=combined)

    def __str__(self) -> str:
        return one_line(f"{self.where}: {self.message}" if self.where else self.message)


def one_line(text: str) -> str:
    """Escape every non-printable character (line breaks of any kind included): names and values from the input
    may hold them, and a message is always shown on one line."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else char.encode("unicode_escape").decode("ascii") for char in text)
