"""Write one run's spec (built by dlbench.spec when the workflow was parsed) for its bench job."""

from dlbench import spec
from dlbench.errors import script_log

sm = snakemake  # noqa: F821 (set by Snakemake's script directive)
with script_log(sm.log[0]) as log:
    spec.write(sm.params.run, sm.output[0])
    print(f"wrote {sm.output[0]}", file=log)
