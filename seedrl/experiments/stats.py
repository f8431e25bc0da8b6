"""The statistics of a comparison, as pure functions (no I/O, fixed RNG seeds).

Seeds are the unit of replication: a method's number is the mean over its training seeds, and its
uncertainty is a percentile bootstrap over those seeds. With 3 seeds such an interval is crude
(it can only be as wide as the seeds' spread), which the report says next to every table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

#: bootstrap resamples and RNG seed used everywhere unless a caller says otherwise
N_BOOT = 10_000
BOOT_SEED = 0


def bootstrap_ci(values: Sequence[float], n_boot: int = N_BOOT, alpha: float = 0.05,
                 seed: int = BOOT_SEED) -> tuple[float, float, float]:
    """Mean of ``values`` and its ``1 - alpha`` percentile-bootstrap interval: ``(mean, lo, hi)``.

    Draws ``n_boot`` resamples of ``len(values)`` values with replacement (``numpy`` generator
    seeded with ``seed``, so the result is reproducible), takes each resample's mean, and returns
    the ``alpha/2`` and ``1 - alpha/2`` percentiles (linear interpolation) of those means. One value
    gives a zero-width interval at that value; no values give ``(nan, nan, nan)``. NaNs are an
    error (a missing seed must be left out by the caller, not silently averaged)."""
    x = np.asarray(list(values), dtype=np.float64)
    if x.size == 0:
        return (math.nan, math.nan, math.nan)
    if np.isnan(x).any():
        raise ValueError("bootstrap_ci: values contain NaN")
    mean = float(x.mean())
    if x.size == 1 or np.all(x == x[0]):
        return (mean, mean, mean)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    means = x[idx].mean(axis=1)
    lo, hi = np.percentile(means, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    # the percentiles of resample means can differ from the mean by rounding only; keep lo <= mean <= hi
    return (mean, min(float(lo), mean), max(float(hi), mean))


def paired_differences(method: Mapping[int, float], baseline: Mapping[int, float]) -> dict[int, float]:
    """Per-seed ``method - baseline`` over the seeds both have (the same seed = the same model
    initialisation, training-task stream and evaluation panels, so the pair shares its noise)."""
    return {s: float(method[s]) - float(baseline[s]) for s in sorted(set(method) & set(baseline))}


def paired_difference_ci(method: Mapping[int, float], baseline: Mapping[int, float], n_boot: int = N_BOOT,
                         alpha: float = 0.05, seed: int = BOOT_SEED) -> dict[str, object]:
    """Mean paired difference with its bootstrap interval (over seeds) and whether the interval
    excludes 0 (``significant``; never with fewer than two seeds)."""
    d = paired_differences(method, baseline)
    mean, lo, hi = bootstrap_ci(list(d.values()), n_boot, alpha, seed)
    significant = bool(len(d) >= 2 and (lo > 0 or hi < 0))
    return {"n_seeds": len(d), "per_seed": d, "mean": mean, "ci95": [lo, hi], "significant": significant}


def paired_task_bootstrap(method: Mapping[int, str], baseline: Mapping[int, str], n_boot: int = N_BOOT,
                          alpha: float = 0.05, seed: int = BOOT_SEED) -> dict[str, object]:
    """Paired difference of success with a hierarchical bootstrap over seeds *and* panel tasks.

    ``method[s]`` / ``baseline[s]``: per seed, the panel's outcomes as a string of ``"0"``/``"1"``
    (one per task, in panel order; both runs of a seed played the same tasks). Each resample draws
    seeds with replacement, then, within each drawn seed, tasks with replacement — the *same* task
    indices for both methods, so the pairing on tasks is kept — and takes the mean over drawn seeds of
    ``success(method) - success(baseline)``. Unlike :func:`paired_difference_ci`, this counts the
    evaluation noise of a finite panel: two seeds that each differ by one task of 64 are not a
    significant difference. ``significant`` = the interval excludes 0 (never with < 2 seeds)."""
    seeds = sorted(set(method) & set(baseline))
    pairs = []
    for s in seeds:
        a, b = str(method[s]), str(baseline[s])
        if len(a) != len(b) or not a or set(a + b) - {"0", "1"}:
            raise ValueError(f"paired_task_bootstrap: seed {s} outcomes differ in length or are not 0/1 strings")
        # signed: a task the method loses and the baseline wins is -1 (uint8 would wrap to 255)
        pairs.append(np.frombuffer(a.encode(), np.uint8).astype(np.int64)
                     - np.frombuffer(b.encode(), np.uint8).astype(np.int64))
    if not pairs:
        return {"n_seeds": 0, "per_seed": {}, "mean": math.nan, "ci95": [math.nan, math.nan],
                "significant": False, "method": "seeds x tasks"}
    per_seed = {s: float(d.mean()) for s, d in zip(seeds, pairs)}
    mean = float(np.mean(list(per_seed.values())))
    rng = np.random.default_rng(seed)
    n_s = len(pairs)
    picks = rng.integers(0, n_s, size=(n_boot, n_s))
    boot = np.zeros(n_boot)
    for k, d in enumerate(pairs):
        # every resample draws task indices for every seed; only the seeds it picked are used
        tasks = rng.integers(0, d.size, size=(n_boot, d.size))
        boot += d[tasks].mean(axis=1) * (picks == k).sum(axis=1)
    boot /= n_s
    lo, hi = np.percentile(boot, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    lo, hi = min(float(lo), mean), max(float(hi), mean)
    return {"n_seeds": n_s, "per_seed": per_seed, "mean": mean, "ci95": [lo, hi],
            "significant": bool(n_s >= 2 and (lo > 0 or hi < 0)), "method": "seeds x tasks"}


def mcnemar_exact(only_before: int, only_after: int) -> float:
    """Two-sided exact McNemar test of paired binary outcomes (the same tasks before and after):
    ``p = min(1, 2 * P(X <= min(b, c)))`` with ``X ~ Binomial(b + c, 1/2)``, where ``b`` and ``c`` are
    the discordant counts (tasks won only before, only after). No discordant task: p = 1."""
    n, k = only_before + only_after, min(only_before, only_after)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def paired_outcomes(before: Mapping[Any, bool], after: Mapping[Any, bool]) -> dict[str, Any]:
    """Two policies' wins on the same tasks (task -> won): ``diff`` (after's success minus before's),
    the discordant counts ``only_before`` / ``only_after`` and their exact McNemar ``p``. The task sets
    must be equal (ValueError otherwise: the comparison would not be paired)."""
    if set(before) != set(after):
        raise ValueError("paired outcomes need the same tasks on both sides")
    n = len(after)
    only_before = sum(before[k] and not after[k] for k in after)
    only_after = sum(after[k] and not before[k] for k in after)
    return {"diff": (only_after - only_before) / n if n else 0.0, "only_before": only_before,
            "only_after": only_after, "p": mcnemar_exact(only_before, only_after)}


def intervals_overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether two closed intervals ``[lo, hi]`` share a point."""
    return a[0] <= b[1] and b[0] <= a[1]


def mean_curve(curves: Sequence[Sequence[tuple[float, float]]]) -> list[tuple[float, float, int]]:
    """Pointwise mean of several ``(x, y)`` curves: ``(x, mean y, number of curves with that x)``,
    sorted by x. Curves of one comparison share their x values (the evaluation schedule)."""
    by_x: dict[float, list[float]] = {}
    for c in curves:
        for x, y in c:
            by_x.setdefault(float(x), []).append(float(y))
    return [(x, sum(v) / len(v), len(v)) for x, v in sorted(by_x.items())]


def episodes_to_threshold(curve: Sequence[tuple[float, float]], threshold: float,
                          tol: float = 1e-9) -> float | None:
    """The first x (environment episodes) at which ``curve`` reaches ``threshold`` (``y >= threshold
    - tol``), or ``None`` if it never does. ``curve`` is a list of ``(episodes, success)`` points,
    e.g. a method's mean-over-seeds curve; it is sorted by episodes first, so a curve that already
    starts at the threshold gives 0 and a tie counts as reached."""
    for x, y in sorted(curve, key=lambda p: p[0]):
        if y >= threshold - tol:
            return float(x)
    return None


def efficiency_ratio(episodes: float | None, baseline_episodes: float | None) -> float | None:
    """``episodes / baseline_episodes`` (< 1: fewer episodes than the baseline needed). ``None``
    where either is missing (threshold never reached) or the baseline needed 0 episodes (the
    initial policy already met it, so no ratio is meaningful)."""
    if episodes is None or baseline_episodes is None or baseline_episodes <= 0:
        return None
    return episodes / baseline_episodes


def equal_per_iteration(a: Mapping[int, Mapping[Any, Any]],
                        b: Mapping[int, Mapping[Any, Any]]) -> dict[int, tuple[int, int]]:
    """``{iteration: (keys whose values are equal, keys both hold)}`` over the iterations both hold, in
    order: how many episodes two runs of one seed played identically (values: rollout digests or traced
    actions, keyed by trajectory)."""
    out = {}
    for it in sorted(set(a) & set(b)):
        common = set(a[it]) & set(b[it])
        out[it] = (sum(a[it][k] == b[it][k] for k in common), len(common))
    return out


def efficiency_ratio_ci(method: Mapping[int, Sequence[tuple[float, float]]],
                        baseline: Mapping[int, Sequence[tuple[float, float]]], n_boot: int = N_BOOT,
                        alpha: float = 0.05, seed: int = BOOT_SEED, tol: float = 1e-9) -> dict[str, Any]:
    """The sample-efficiency ratio with a percentile-bootstrap interval over seeds.

    ``method[s]`` / ``baseline[s]``: per seed, the ``(episodes, success)`` evaluation points of that
    seed's cell (both on one schedule). The point estimate is the report's: the threshold is the
    baseline's final mean success, and the ratio is (episodes the method's mean curve needs to first
    reach it) / (episodes the baseline's needs), :func:`episodes_to_threshold` and
    :func:`efficiency_ratio`. Each resample draws the common seeds with replacement, the *same* draw
    for both (a seed fixes the start and task stream of both cells), and recomputes the threshold, both
    mean curves and the ratio. A resample in which the method never reaches the threshold counts as an
    infinite ratio (``hi`` is then ``None``: "not reached within the budget"); one in which the baseline
    meets it at 0 episodes has no ratio and is left out (``undefined_frac``). Percentiles are taken
    without interpolation (the ratio only takes the values the evaluation grid allows). Task noise of
    the finite panel is not resampled: the interval is over seeds only, and as crude as few seeds make it.

    Returns ``{"n_seeds", "ratio", "ci95": [lo, hi], "never_frac", "undefined_frac"}`` (``None`` where
    there is no number)."""
    seeds = sorted(set(method) & set(baseline))
    none = {"n_seeds": len(seeds), "ratio": None, "ci95": [None, None], "never_frac": None, "undefined_frac": None}
    if not seeds:
        return none
    xs = sorted({float(x) for s in seeds for x, _ in list(method[s]) + list(baseline[s])})

    def grid(curve: Sequence[tuple[float, float]]) -> np.ndarray:
        ys = {float(x): float(y) for x, y in curve}
        if set(ys) != set(xs):
            raise ValueError("efficiency_ratio_ci: the cells were evaluated on different schedules")
        return np.array([ys[x] for x in xs])

    m = np.stack([grid(method[s]) for s in seeds])
    b = np.stack([grid(baseline[s]) for s in seeds])
    x = np.array(xs)

    def ratios(mm: np.ndarray, bb: np.ndarray) -> np.ndarray:
        """Ratio per row of mean curves ``mm``, ``bb`` (rows: resamples): inf = never, nan = undefined."""
        thr = bb[:, -1:] - tol
        reached_m, reached_b = mm >= thr, bb >= thr  # the baseline always reaches its own final value
        ep_m = np.where(reached_m.any(axis=1), x[reached_m.argmax(axis=1)], np.inf)
        ep_b = x[reached_b.argmax(axis=1)]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(ep_b > 0, ep_m / np.where(ep_b > 0, ep_b, 1.0), np.nan)

    point = float(ratios(m.mean(axis=0, keepdims=True), b.mean(axis=0, keepdims=True))[0])
    idx = np.random.default_rng(seed).integers(0, len(seeds), size=(n_boot, len(seeds)))
    boot = ratios(m[idx].mean(axis=1), b[idx].mean(axis=1))
    defined = boot[~np.isnan(boot)]
    out = dict(none, ratio=None if math.isnan(point) or math.isinf(point) else point,
               undefined_frac=float(np.isnan(boot).mean()),
               never_frac=float(np.isinf(defined).mean()) if defined.size else None)
    if defined.size:
        lo, hi = np.percentile(defined, [100 * alpha / 2, 100 * (1 - alpha / 2)], method="inverted_cdf")
        out["ci95"] = [None if math.isinf(lo) else float(lo), None if math.isinf(hi) else float(hi)]
    return out
