"""The container types a manifest's values are checked against, as tuples for ``isinstance``.

``isinstance(value, MAPPING_TYPES)`` says what ``isinstance(value, Mapping)`` says (a dict is a Mapping), but for
the dicts JSON and YAML give it costs a type check (~20 ns) instead of the abstract class's ``__instancecheck__``
(~150 ns, a call into Python); a Pod admission makes a few dozen such checks. ``SEQUENCE_TYPES`` is built once,
where ``isinstance(value, list | tuple)`` builds a union on every call (~85 ns against ~20)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

MAPPING_TYPES: Final = (dict, Mapping)
SEQUENCE_TYPES: Final = (list, tuple)
