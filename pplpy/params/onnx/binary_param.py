"""Attributes of the non-arithmetic binary ops (Mod, BitShift) and IsInf."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModParam:
    fmod: int = 0  # 0: the remainder takes the divisor's sign (np.mod); 1: the dividend's


@dataclass(frozen=True, slots=True)
class BitShiftParam:
    direction: str = ""  # "LEFT" or "RIGHT" (required by the spec: no default)


@dataclass(frozen=True, slots=True)
class IsInfParam:
    detect_negative: int = 1
    detect_positive: int = 1
