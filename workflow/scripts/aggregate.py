"""Rank records of every run -> results/summary.csv (logic in dlbench.aggregate)."""

from pathlib import Path

from dlbench.aggregate import aggregate
from dlbench.errors import script_log

sm = snakemake  # noqa: F821 (set by Snakemake's script directive)
with script_log(sm.log[0]) as log:
    prewarm = {str(Path(p).relative_to("results/prewarm").with_suffix("")): p for p in sm.input.prewarm}
    df = aggregate(
        sm.input.runs,
        sm.output[0],
        targets=sm.params.targets,
        baseline=sm.params.baseline,
        thrash=sm.params.thrash,
        prewarm=prewarm,
    )
    print(f"wrote {sm.output[0]} ({len(df)} runs, {int(df['pass'].sum())} pass)", file=log)
