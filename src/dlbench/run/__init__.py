"""One run, whole: `spec.RunSpec` (its settings and every rule that ties them), the loaders a run may name
(`loaders`), the frame modes (`modes`), and the matrix config.yaml expands into runs (`matrix`). Torch-free."""
