"""Reading back the ``megatron_lm_args.txt`` mtk writes beside each checkpoint
(:func:`mtk.training.interop.megatron_lm.args_file_text`: a bash array a user sources before ``pretrain_gpt.py``).
The package only writes it; the tests read its argv to hand it to Megatron-LM's own parser and loader.

Child scripts (run by path, not under pytest) import it after putting ``tests/`` on ``sys.path``."""

from __future__ import annotations

import shlex

from mtk.training.interop.megatron_lm import ARGS_ARRAY


def read_args_file(text: str) -> list[str]:
    """The argv of an ``args_file_text`` file."""
    body = text.split(f"{ARGS_ARRAY}=(", 1)[1].rsplit(")", 1)[0]
    return shlex.split(body)
