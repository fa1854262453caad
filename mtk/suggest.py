"""'Did you mean …?' for every enumerated choice a user types: the CLI's options and verbs (click), the
entrypoint's steps and the node-side steps' argparse options — as the spec's unknown keys already get; a spec key
typed in Megatron's words gets the mtk field it means (:func:`megatron_field`)."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable


def did_you_mean(value: object, choices: Iterable[object]) -> str:
    """``"; did you mean 'slurm'?"`` for the closest choice, or "" when none is close."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.5)
    return f"; did you mean '{close[0]}'?" if close else ""


def megatron_field(key: str) -> str:
    """For a spec key typed in Megatron-LM's or megatron-core's words (``parallel.tensor_model_parallel_size``,
    ``train.recompute_granularity``), the mtk field it means and its flag — ``"parallel.tp
    (--tensor-model-parallel-size)"`` — from the one flag table; "" when the key is no Megatron name. Closeness of
    spelling would point the wrong way here ('sequence_parallel' for tensor_model_parallel_size)."""
    from mtk.megatron_flags import suggestion

    return suggestion(key)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the closest choice suggested (Python 3.14's ``suggest_on_error``, for 3.10-3.13 too)."""

    def _check_value(self, action: argparse.Action, value: object) -> None:
        choices = action.choices
        if choices is not None and value not in choices:
            hint = did_you_mean(value, choices)
            if hint:
                listed = ", ".join(repr(c) for c in choices)
                raise argparse.ArgumentError(action, f"invalid choice: {value!r}{hint} (choose from {listed})")
        super()._check_value(action, value)
