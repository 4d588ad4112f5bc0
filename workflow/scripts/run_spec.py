"""Write one run's spec (a `dlbench.run.spec.RunSpec`, built when the workflow was parsed) for its bench job."""

from dlbench.errors import script_log
from dlbench.run import spec as runspec

sm = snakemake  # noqa: F821 (set by Snakemake's script directive)
with script_log(sm.log[0]) as log:
    runspec.write(runspec.RunSpec.from_dict(sm.params.run), sm.output[0])
    print(f"wrote {sm.output[0]}", file=log)
