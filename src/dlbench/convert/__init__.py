"""v2.1 -> v3.0 conversion.

Modules: `plan` (manifest of work units), `lease` (leases on a shared filesystem), `work` (leased units write the
final files), `finalize` (metadata + publish), `run` (all three with a local worker pool).
"""
