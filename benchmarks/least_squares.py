"""Least-squares fits for the soak's verdict: a line's slope, and a slope at a fixed value of a
second regressor (fds against time at a fixed number of live processes), with standard errors.
Pure, stdlib only."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["NetSlope", "least_squares_slope", "net_slope", "slope_stderr"]

# 1 - r² of x against z below this: z is a straight line in x, the two can't be told apart.
_COLLINEAR = 1e-9


def least_squares_slope(points: Sequence[tuple[float, float]]) -> float:
    """Slope of the least-squares line through (x, y) points; 0 for fewer than two x values."""
    n = len(points)
    if n < 2:
        return 0.0
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    if sxx == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx


def slope_stderr(points: Sequence[tuple[float, float]]) -> float:
    """Standard error of the least-squares slope (how much noise alone moves it); 0 for
    fewer than three points."""
    n = len(points)
    if n < 3:
        return 0.0
    slope = least_squares_slope(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    if sxx == 0:
        return 0.0
    residual = sum((y - mean_y - slope * (x - mean_x)) ** 2 for x, y in points)
    return math.sqrt(residual / (n - 2) / sxx)


@dataclass(frozen=True)
class NetSlope:
    """y = a + slope·x + per_z·z: `slope` is y's change per unit of x with z held fixed,
    `per_z` its change per unit of z; each with its standard error."""

    slope: float
    slope_se: float
    per_z: float
    per_z_se: float


def net_slope(rows: Sequence[tuple[float, float, float]]) -> NetSlope | None:
    """The least-squares fit through (x, z, y) rows; None when x's and z's parts cannot be
    told apart: fewer than four rows (no residual left to measure the noise by), z constant,
    or z a straight line in x."""
    n = len(rows)
    if n < 4:
        return None
    mx = sum(r[0] for r in rows) / n
    mz = sum(r[1] for r in rows) / n
    my = sum(r[2] for r in rows) / n
    sxx = sum((x - mx) ** 2 for x, _, _ in rows)
    szz = sum((z - mz) ** 2 for _, z, _ in rows)
    sxz = sum((x - mx) * (z - mz) for x, z, _ in rows)
    sxy = sum((x - mx) * (y - my) for x, _, y in rows)
    szy = sum((z - mz) * (y - my) for _, z, y in rows)
    det = sxx * szz - sxz**2
    if sxx == 0 or szz == 0 or det <= _COLLINEAR * sxx * szz:
        return None
    slope = (szz * sxy - sxz * szy) / det
    per_z = (sxx * szy - sxz * sxy) / det
    residual = sum((y - my - slope * (x - mx) - per_z * (z - mz)) ** 2 for x, z, y in rows)
    variance = residual / (n - 3)
    return NetSlope(slope, math.sqrt(variance * szz / det), per_z, math.sqrt(variance * sxx / det))
