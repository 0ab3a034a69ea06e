"""``python -m zvf.validate TARGET [--level N] [--json]``."""

import sys

from .cli import main

sys.exit(main())
