"""``python -m mtk.launcher.cli`` = ``mtk``."""

import sys

from . import main

sys.exit(main())
