"""`python -m scripts.report results/<machine>`: rebuild one machine's tables and plots (scripts/report/__init__.py)."""

import sys

from . import main

sys.exit(main())
