"""``python -m mtk`` = ``mtk``."""

import sys

from mtk.launcher.cli import main

sys.exit(main())
