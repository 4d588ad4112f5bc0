"""`python -m dlbench.loopback proxy ...`: the shaping proxy (`dlbench.loopback.proxy`); `python -m dlbench.loopback
hub ...`: the loopback Hugging Face Hub (`dlbench.loopback.hub`)."""

from .proxy import main

main()
