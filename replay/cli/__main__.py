"""`python -m replay.cli ...`: the `replay` command, for subprocesses that must use this interpreter."""
import sys

from replay.cli.main import main

sys.exit(main())
