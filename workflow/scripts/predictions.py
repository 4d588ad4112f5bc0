"""results/predictions.csv: every run of the matrix predicted from its dataset and source's calibration
(`dlbench.model`); it needs no bench job."""

import pandas as pd

from dlbench import atomic
from dlbench.errors import script_log
from dlbench.model.calibration import Calibration
from dlbench.model.table import predict_run, row

sm = snakemake  # noqa: F821 (set by Snakemake's script directive)
with script_log(sm.log[0]) as log:
    calibrations = {key: Calibration.read(path) for key, path in sm.params.calibrations.items()}
    rows = []
    for run in sm.params.runs:
        cal = calibrations.get(f"{run['dataset']}/{run['source']}")
        hosts = run["nodes"] if sm.params.hosts_spread else 1
        found = predict_run(run, cal, hosts=hosts) if cal else "decoding on the GPU is not calibrated"
        rows.append({"scenario": run["scenario"], "run_id": run["run_id"], **row(found)})
    with atomic.file(sm.output[0]) as tmp:
        pd.DataFrame(rows).to_csv(tmp, index=False)
    print(f"wrote {sm.output[0]}: {len(rows)} runs", file=log)
