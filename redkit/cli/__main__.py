"""`python -m redkit.cli ...`: the same as the `redkit` command (tests and launchers use it)."""

import sys

from redkit.cli import main

sys.exit(main())
