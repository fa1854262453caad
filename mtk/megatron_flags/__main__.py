"""``python -m mtk.megatron_flags docs/megatron-lm-flags.md``: write the reference page from the table."""

import sys
from pathlib import Path

from mtk.files import atomic_write

from .reference import reference_markdown

atomic_write(Path(sys.argv[1]), reference_markdown())
