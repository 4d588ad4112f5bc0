"""Advice: what lifts each run (`prescribe`: where its time went, its bound, the changes ranked by their predicted or
measured gain, shuffle first where it fell below the floor) and the proof (`prove`: the top change run beside the run
as it was, in alternating legs)."""
