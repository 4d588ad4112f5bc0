"""summary.csv -> results/plots/*.png, or the conversion table -> conversion.png (logic in dlbench.plots)."""

from pathlib import Path

from dlbench.errors import script_log
from dlbench.plots import plot_all

sm = snakemake  # noqa: F821 (set by Snakemake's script directive)
with script_log(sm.log[0]) as log:
    outdir = Path(sm.output[0]).parent
    if sm.params.conversion:
        written = plot_all(None, outdir, conversion=sm.input[0])
    else:
        written = plot_all(sm.input[0], outdir, thrash=sm.params.thrash)
    for p in written:
        print(f"wrote {p}", file=log)
