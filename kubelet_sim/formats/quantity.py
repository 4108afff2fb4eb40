"""Kubernetes resource quantities ("500m", "0.5", "128Mi", "1e3") as exact numbers, in bounded time.

The one parser of quantities in the agent: requests, limits and overhead, the downward API's
values and divisors, the memory of an emptyDir, the node's own --cpu, --memory and
--*-reserved, and --container-log-max-size. A shared piece (pure, no I/O), so that pod logic,
the node, volumes and the runtime's log rotation all read a quantity the same way.
`milli_value` and `value` round up like Quantity.MilliValue() and Quantity.Value().

Any quantity the API server accepts is decided in time linear in its length. The server keeps
`1e999990` as written (an int64 mantissa and an int32 exponent); building that number
(`Decimal(10) ** 999990`, then an `int` of a million digits) costs seconds and ends in
`ValueError: Exceeds the limit (4300 digits)`. No power of ten is built from an exponent here:

- at or beyond 2**63 (more of anything than a node has; the kubelet's own counters are int64)
  a value is saturated to +-2**63, and `milli_value`/`value` to the int64 range, so a pod that
  asks for `1e999990` CPUs is simply more than allocatable (OutOfcpu);
- a value too small to matter (below 10**-40) may become 10**-45 of its sign: rounding up
  still gives what the exact value gives (1 for a positive one, 0 for a negative);
- in between, at most `_DIGITS` significant digits are kept; dropped ones are stood for by half
  a unit in the last kept place, which rounds up (to thousandths or units, through any binary
  suffix) exactly as the full number does.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
SATURATED = Fraction(2**63)  # |value| at or past this: more than any node has
_TINY = Fraction(1, 10**45)  # stands for any |value| below 10**-40

_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12}
_DECIMAL_SUFFIXES |= {"P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_QUANTITY = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+)|([a-zA-Z]*))$")
# Significant digits kept: with values below 10**20 here, the last kept one is below
# 10**-80, finer than 2**-60 (the largest binary suffix) times a thousandth, which is what
# makes rounding up exact (see the module's docstring).
_DIGITS = 100
_MAX_EXPONENT_DIGITS = 15  # an exponent longer than this is past every bound above

Quantity = str | int | float


def parse_quantity(text: Quantity) -> Fraction:
    """The value of a quantity, exact between 10**-40 and 2**63 and saturated outside; a
    ValueError for anything the API server would refuse to parse."""
    if isinstance(text, bool):
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    if isinstance(text, int):
        if abs(text) >= SATURATED:
            return SATURATED if text > 0 else -SATURATED
        return Fraction(text)
    if isinstance(text, float):
        if not math.isfinite(text):
            raise ValueError(f"quantities must match the regular expression: {text!r}")
        text = repr(text)  # the shortest decimal that is this float: 0.1 stays 0.1
    match = _QUANTITY.match(text.strip())
    if not match:
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    sign, whole, fraction, exponent, suffix = match.groups()
    fraction = fraction or ""
    if not whole and not fraction:
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    negative = sign == "-"
    binary = 0
    if exponent is not None:
        shift = _exponent(exponent)
    elif suffix in _DECIMAL_SUFFIXES:
        shift = _DECIMAL_SUFFIXES[suffix]
    elif suffix in _BINARY_SUFFIXES:
        shift, binary = 0, _BINARY_SUFFIXES[suffix]
    else:
        raise ValueError(f"unable to parse quantity's suffix: {text!r}")
    return _value(negative, whole + fraction, shift - len(fraction), binary)


def _exponent(text: str) -> int | float:
    """An exponent's value; one too long to be read is an infinity of its sign."""
    negative = text.startswith("-")
    digits = text.lstrip("+-").lstrip("0") or "0"
    if len(digits) > _MAX_EXPONENT_DIGITS:
        return -math.inf if negative else math.inf
    return -int(digits) if negative else int(digits)


def _value(negative: bool, digits: str, shift: int | float, binary: int) -> Fraction:
    """(-1 if negative) * int(digits) * 10**shift * 2**binary, bounded as the module says."""
    significant = digits.lstrip("0")
    stripped = significant.rstrip("0")
    if not stripped:
        return Fraction(0)
    shift += len(significant) - len(stripped)  # the trailing zeros
    # 10**(order - 1) <= int(stripped) * 10**shift < 10**order
    order = len(stripped) + shift
    if order - 1 > 19:  # at least 10**20 > 2**63
        magnitude = SATURATED
    elif order < -40 - 19:  # below 10**-59 * 2**60 < 10**-40
        magnitude = _TINY
    else:
        assert isinstance(shift, int)  # an infinite shift made `order` infinite above
        kept = stripped[:_DIGITS]
        last = shift + len(stripped) - len(kept)  # the power of ten of the last kept digit
        mantissa = Fraction(int(kept))
        if len(kept) < len(stripped):
            mantissa += Fraction(1, 2)  # somewhere strictly between this and the next one
        magnitude = mantissa * Fraction(10) ** last * 2**binary
        magnitude = min(magnitude, SATURATED)
    return -magnitude if negative else magnitude


def _int64(number: int) -> int:
    return max(INT64_MIN, min(INT64_MAX, number))


def milli_value(text: Quantity) -> int:
    """Thousandths, rounded up (Quantity.MilliValue), within int64: "0.5" -> 500, "1m" -> 1,
    "100u" -> 1, "1e999990" -> 2**63 - 1."""
    return _int64(math.ceil(parse_quantity(text) * 1000))


def value(text: Quantity) -> int:
    """Whole units, rounded up (Quantity.Value), within int64: "128Mi" -> 134217728,
    "500m" -> 1, "1e999990" -> 2**63 - 1."""
    return _int64(math.ceil(parse_quantity(text)))


def add_saturating(a: int, b: int) -> int:
    """A sum of amounts that stays in int64: two pods of 2**63 - 1 are still that much."""
    return _int64(a + b)
