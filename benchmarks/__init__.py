"""Benchmark commands that print their figures (not tests)."""
