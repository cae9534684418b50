"""`python -m server.cli`, the launch line editors' settings name: the same as `infill-ls` (infill/cli.py)."""

import sys

from infill.cli import main

if __name__ == "__main__":
    sys.exit(main())
