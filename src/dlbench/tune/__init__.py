"""`dlbench tune`: the knob space and its ranking by the model (`search`), and the tune itself (`run`): calibrate,
search, prove the best few by running them, answer in the user's terms."""
