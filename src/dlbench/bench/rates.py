"""A run's rate from its windows: when the windows' median is known (`median_known`, which also stops a run's
windows) and what stands for the run where it is not (`run_rate`). Free of torch: the summary reads it too."""

from __future__ import annotations

import numpy as np

from ..run.spec import MIN_WINDOWS

AGREE = 0.05  # windows whose median is known to this share (`median_known`) agree: a run without a precision


def median_known(rates: list[float], precision: float) -> bool:
    """Whether the median of these window rates is known to `precision` (a share of it): at least MIN_WINDOWS, and
    the standard error of the median (1.25 sd / sqrt(n), for rates spread about normally) within it. 0: never."""
    if precision <= 0 or len(rates) < MIN_WINDOWS:
        return False
    median = float(np.median(rates))
    return median > 0 and 1.2533 * float(np.std(rates, ddof=1)) / np.sqrt(len(rates)) <= precision * median


def run_rate(windows: list[dict], precision: float = 0.0) -> float:
    """A rank's samples/s: the median window's where the windows agree (their median known to the run's
    `precision`, else AGREE), robust to one window a host hiccup caught; else every window's samples over their
    seconds. A loader that delivers in bursts longer than a window (Ray Data: an epoch read ahead in 1 s, then 3-5 s
    to restart the next) gives windows of two kinds, and their median is whichever kind is the more often caught
    (1,870 or 633 samples/s on one set, where training gets 513). The one-rank case of `ranks_rate`."""
    return ranks_rate([windows], precision)


def window_totals(per_rank: list[list[dict]]) -> np.ndarray:
    """Samples/s in each window, summed over the ranks (which ran at once), over the windows every rank has."""
    n = min(len(w) for w in per_rank)
    return np.sum([[w["samples"] / w["seconds"] for w in windows[:n]] for windows in per_rank], axis=0)


def ranks_rate(per_rank: list[list[dict]], precision: float = 0.0) -> float:
    """A run's samples/s over its ranks, from its windows' totals (each window's rate summed over the ranks, as they
    ran at once): their median where they agree, else their mean weighted by the windows' seconds (the ranks' mean),
    which for one rank is `run_rate` and always lies within the totals' range."""
    totals = window_totals(per_rank)
    n = len(totals)
    if n < 2 or median_known(list(totals), precision or AGREE):
        return float(np.median(totals))
    seconds = np.mean([[w["seconds"] for w in windows[:n]] for windows in per_rank], axis=0)
    return float(np.sum(totals * seconds) / np.sum(seconds))
