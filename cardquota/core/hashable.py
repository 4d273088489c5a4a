"""Hashable maps: a ``dict`` subclass kept in a module of its own.

The optional compiled build (``CARDQUOTA_COMPILE=1``, see ``setup.py``) leaves this module interpreted: mypyc
compiles a subclass of ``dict`` without complaint, but two equal instances built by compiled code then compare
unequal with ``==``. Nothing else lives here, so the rest of the core compiles.
"""

from __future__ import annotations


class HashableCards(dict[str, int]):
    """Cards by card type in a map never changed once made, hashable by its entries: the charge holding it can be
    its own key in a table of shared charges (no second tuple of its fields per entry)."""

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))
