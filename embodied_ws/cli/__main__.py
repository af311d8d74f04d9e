"""``python -m embodied_ws.cli``."""

import sys

from embodied_ws.cli import main

if __name__ == "__main__":
    sys.exit(main())
