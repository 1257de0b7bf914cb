"""Human-readable numbers: SI prefixes for FLOPs, M/B for parameters."""
from __future__ import annotations

_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _sci(value: int) -> str:
    """An exact integer in scientific notation from its digits (no float: it may not fit one)."""
    digits = str(abs(value))
    mantissa = f"{digits[0]}.{digits[1:4].ljust(3, '0')}"
    return f"{'-' if value < 0 else ''}{mantissa}e{len(digits) - 1}"


def si(value: float, unit: str = "FLOP") -> str:
    """1.234e12 -> '1.234 TFLOP'; 0 -> '0'; beyond 1e18, scientific notation."""
    if value == 0:
        return "0"
    if isinstance(value, int) and abs(value) >= 10**18:
        return f"{_sci(value)} {unit}"
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.3f} {prefix}{unit}"
    return f"{value:g} {unit}"


def params(value: int) -> str:
    """85_798_656 -> '85.80 M'."""
    if value == 0:
        return "0"
    if abs(value) >= 10**15:
        return _sci(value)
    if abs(value) >= 1e9:
        return f"{value / 1e9:.3f} B"
    if abs(value) >= 1e6:
        return f"{value / 1e6:.2f} M"
    if abs(value) >= 1e3:
        return f"{value / 1e3:.2f} k"
    return str(value)


def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def seconds(value: float) -> str:
    """0.00123 -> '1.230 ms'."""
    if value == 0:
        return "0"
    for scale, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "us")):
        if value >= scale:
            return f"{value / scale:.3f} {unit}"
    return f"{value / 1e-9:.1f} ns"
