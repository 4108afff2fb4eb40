"""resource.Quantity as the fake API server reads it (`parse`) and writes it back (`canonical`,
apimachinery's CanonicalizeBytes): the suffix kind of the input is kept (binary, decimal or
exponent), the number made as short as it goes exactly: 7237632Ki is 7068Mi, 1000m is 1, 0.5 is
500m, 1536Mi stays, 1.5Gi is 1536Mi.

The fake's one parser, kept apart from the agent's (kubelet_sim/formats/quantity.py) on purpose: the
fake stands for the server, and a test that compares the agent's numbers with the fake's must
not read both with the same code."""

from __future__ import annotations

import math
import re
from fractions import Fraction

_FORM = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE])([+-]?\d+))?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$"
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {v: k for k, v in _DECIMAL.items()}
_BINARY_SUFFIX = {v: k for k, v in _BINARY.items()} | {0: ""}


INT64_MAX = 2**63 - 1


def parse(text: object) -> Fraction | None:
    """The exact value of a quantity, or None when `text` is not one."""
    found = _FORM.match(str(text).strip())
    return None if found is None else _value(*found.groups())


def _value(number: str, e_mark: str | None, exponent: str | None, suffix: str | None) -> Fraction:
    value = Fraction(number)
    if e_mark:
        value *= Fraction(10) ** int(exponent or 0)
    suffix = suffix or ""
    if suffix in _BINARY:
        return value * 2 ** _BINARY[suffix]
    return value * Fraction(10) ** _DECIMAL[suffix]


def canonical(text: str) -> str | None:
    """The server's form of a quantity, or None when `text` is not one."""
    found = _FORM.match(text.strip())
    if not found:
        return None
    number, e_mark, exponent, suffix = found.groups()
    if e_mark and not suffix:
        large = _large_exponent(number, int(exponent))
        if large is not None:
            return large
    value = _value(number, e_mark, exponent, suffix)
    if value == 0:
        return "0"
    if suffix in _BINARY and abs(value) >= 1024 and value.denominator == 1:
        amount, power = int(value), 0
        while amount % 1024 == 0 and power < 60:
            amount //= 1024
            power += 10
        return f"{amount}{_BINARY_SUFFIX[power]}"
    nanos = math.ceil(value * 10**9)  # finer than nano rounds up
    amount, power = nanos, -9
    while amount % 10 == 0 and power < 18:
        amount //= 10
        power += 1
    while power % 3:
        amount *= 10
        power -= 1
    if e_mark:
        return f"{amount}e{power}" if power else str(amount)
    return f"{amount}{_DECIMAL_SUFFIX[power]}"


def _large_exponent(number: str, exponent: int) -> str | None:
    """`1e999990` as the server keeps it (an int64 mantissa and a scale, never expanded), or
    its cap of 2**63 - 1 when the mantissa does not fit; None for exponents of ordinary size
    (the general rule above), worked out on the digits without building the number."""
    sign = "-" if number.startswith("-") else ""
    whole, _, fraction = number.lstrip("+-").partition(".")
    digits = (whole + fraction).lstrip("0")
    mantissa = digits.rstrip("0")
    if not mantissa:
        return "0"
    power = exponent - len(fraction) + len(digits) - len(mantissa)
    if power <= 18:
        return None
    if len(mantissa) > 18 or int(mantissa) > INT64_MAX:
        return sign + str(INT64_MAX)
    mantissa += "0" * (power % 3)
    return f"{sign}{mantissa}e{power - power % 3}"
