"""Conversion timings (convert run --record) -> results/tables/conversion.csv (logic in dlbench.aggregate)."""

from dlbench.aggregate import conversion_table
from dlbench.errors import script_log

sm = snakemake  # noqa: F821 (set by Snakemake's script directive)
with script_log(sm.log[0]) as log:
    df = conversion_table(list(sm.input), sm.output[0])
    print(f"wrote {sm.output[0]} ({len(df)} conversions)", file=log)
