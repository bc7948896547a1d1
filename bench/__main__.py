"""``python -m bench``: see :mod:`bench.runner`."""

import sys

from bench.runner import main

sys.exit(main())
