"""``python -m embodied_ws.cli``."""

import sys

from embodied_ws.cli import main

sys.exit(main())
