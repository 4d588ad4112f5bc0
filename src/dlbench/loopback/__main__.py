"""`python -m dlbench.loopback proxy ...`: the shaping proxy (`dlbench.loopback.proxy`)."""

from .proxy import main

main()
