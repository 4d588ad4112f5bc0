"""The workflow's reporting: rank records into summary.csv (`aggregate`), plots, `compare` of two results, records
of runs that failed, and the output names the workflow and the library share. The only part of dlbench that
imports pandas and matplotlib; the loaders never load it."""
