"""Kubernetes resource quantities ("500m", "0.5", "128Mi", "1G") as exact numbers.

A small port of apimachinery's resource.Quantity, enough for requests, limits and the downward
API: Decimal keeps "0.1" exact, and `milli_value`/`value` round up like Quantity.MilliValue() and
Quantity.Value() do.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?[0-9]+|[a-zA-Z]*)$")
_EXPONENT = re.compile(r"^[eE][+-]?[0-9]+$")

Quantity = str | int | float


def parse_quantity(text: Quantity) -> Decimal:
    """The exact value of a quantity; ValueError for anything the API server would refuse."""
    if isinstance(text, bool):
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    if isinstance(text, int | float):
        return Decimal(str(text))
    match = _QUANTITY.match(text.strip())
    if not match:
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    number, suffix = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation as err:  # pragma: no cover - the regex admits only numbers
        raise ValueError(f"invalid quantity {text!r}") from err
    if _EXPONENT.match(suffix):
        return base * Decimal(10) ** int(suffix[1:])
    if suffix not in _SUFFIXES:
        raise ValueError(f"unable to parse quantity's suffix: {text!r}")
    return base * _SUFFIXES[suffix]


def milli_value(text: Quantity) -> int:
    """Thousandths, rounded up (Quantity.MilliValue): "0.5" -> 500, "1m" -> 1, "100u" -> 1."""
    return math.ceil(parse_quantity(text) * 1000)


def value(text: Quantity) -> int:
    """Whole units, rounded up (Quantity.Value): "128Mi" -> 134217728, "500m" -> 1."""
    return math.ceil(parse_quantity(text))
