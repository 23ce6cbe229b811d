"""``python -m ncrtl.cli``."""

import sys

from . import main

sys.exit(main())
