"""Shell completion, as README says to turn it on (`_MTK_COMPLETE=bash_source mtk`): the script is click's, and
completing a verb prefix offers the lazily registered verbs without importing them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

MTK = shutil.which("mtk") or str(Path(sys.executable).with_name("mtk"))


def _complete(words: str) -> list[str]:
    env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1),
           "_MTK_COMPLETE": "bash_complete"}
    out = subprocess.run([MTK], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [line.split(",", 1)[1] for line in out.stdout.splitlines()]


def test_bash_completion_script_and_verbs():
    script = subprocess.run([MTK], env={**os.environ, "_MTK_COMPLETE": "bash_source"}, capture_output=True,
                            text=True, timeout=60)
    assert script.returncode == 0 and "_mtk_completion()" in script.stdout
    assert _complete("mtk pr") == ["presets", "prune"]
    assert "--backend" in _complete("mtk launch --b")
