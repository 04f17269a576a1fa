"""Lab 9, the checker's own byte formulas: what flash attention keeps for backward, and what each rank sends in the
ring and in Ulysses. The checks hold the measurements to them (checks.py); the figures print them beside what was
measured (report.py)."""
from __future__ import annotations


def flash_bytes(b: int, h: int, s: int, d: int) -> int:
    """fp32 bytes flash attention keeps for backward, the output aside: q, k, v (3 bhsd) + lse, one per row (bhs)."""
    return 4 * (3 * b * h * s * d + b * h * s)


def ring_bytes_expected(b: int, h: int, s: int, d: int, n: int) -> tuple[float, float]:
    """(forward, backward) bytes one rank sends in ring attention. S = 4bhsd, the whole K (V the same):
    forward K and V blocks of S/N, N-1 hops; backward those again, plus dK and dV making N hops home."""
    S = 4 * b * h * s * d
    return 2 * (n - 1) * S / n, 2 * (n - 1) * S / n + 2 * S


def ulysses_bytes_expected(b: int, h: int, s: int, d: int, n: int) -> float:
    """Bytes one rank sends per direction (forward, and again backward): 4 all-to-alls of its (b, h, s/N, d) block,
    (N-1)/N of each leaves the rank."""
    return 4 * (n - 1) / n * 4 * b * h * (s // n) * d
