"""What a run's delivered batches are checked for: every frame right (`frames`: barcodes, an independent decode),
how well they shuffle (`shuffle`), an interrupted epoch resumed exactly (`resume`)."""
