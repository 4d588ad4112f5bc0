"""Benchmark jobs: `runner` (the harness), `record` (result records)."""
