"""The entry point decides: a command that runs ``pretrain_gpt.py`` trains what mtk trains (megatron-core's
GPTModel: GPT, Llama, Mixtral-style MoE); Megatron-LM's other entry points train other models and are refused by
name, as are scripts whose training command the reader cannot see (it is in another file, or only running could
tell which program runs)."""

from __future__ import annotations

from dataclasses import dataclass

from mtk.exitcodes import BadInput

from ..bash_reader import Command, Script, Value

GPT = "pretrain_gpt.py"
WHAT_MTK_TRAINS = ("mtk trains megatron-core's GPTModel, as Megatron-LM's pretrain_gpt.py does (GPT, Llama, "
                   "Mixtral-style MoE)")
# (the end of the program's path, what it trains or does, whether it trains)
ENTRIES: tuple[tuple[str, str, bool], ...] = (
    ("pretrain_bert.py", "BERT (a bidirectional encoder with masked-LM heads)", True),
    ("pretrain_t5.py", "T5 (an encoder-decoder)", True),
    ("pretrain_hybrid.py", "a hybrid Mamba/attention model", True),
    ("pretrain_mamba.py", "a Mamba state-space model", True),
    ("pretrain_vlm.py", "a vision-language model", True),
    ("multimodal/train.py", "a multimodal (vision-language) model", True),
    ("mimo/train.py", "a multimodal (MIMO) model", True),
    ("mimo/pretrain_mimo.py", "a multimodal (MIMO) model", True),
    ("pretrain_retro.py", "RETRO (retrieval-augmented)", True),
    ("pretrain_ict.py", "an ICT retriever", True),
    ("pretrain_vision_classify.py", "a vision transformer", True),
    ("pretrain_vision_dino.py", "a vision transformer (DINO)", True),
    ("pretrain_vision_inpaint.py", "a vision transformer (inpainting)", True),
    ("train_rl.py", "a policy by reinforcement learning (GRPO)", True),
    ("finetune_gpt.py", "a GPT fine-tuned from a checkpoint on its own data pipeline", True),
    ("modelopt/finetune.py", "a quantization- or distillation-aware fine-tune", True),
    ("tasks/main.py", "a downstream task", True),
    ("tools/preprocess_data.py", "a data preparation tool, no training", False),
)


@dataclass(frozen=True)
class Training:
    """The command that trains: the words before the entry point (launcher), the entry and its arguments."""

    command: Command
    launcher: tuple[Value, ...]
    entry: str
    argv: tuple[Value, ...]


class NotGpt(BadInput):
    """The script trains another model, or none mtk can see."""


def _entry_of(word: Value) -> str | None:
    """The program's file name when the word is a known ``*.py`` path (its directory may be unknown)."""
    if not word.chunks or word.chunks[-1].why:
        return None
    last = word.chunks[-1].text
    if len(word.chunks) > 1 and "/" not in last:
        return None
    return word.text if word.text.endswith(".py") else None


def _module(words: tuple[Value, ...], i: int) -> str | None:
    """``python -m pkg.mod`` / ``torchrun -m pkg.mod``: the module's file (torch's own launchers aside)."""
    if i == 0 or words[i - 1].text != "-m" or not words[i].known:
        return None
    module = words[i].text
    if module.startswith("torch.distributed.") or not module.replace(".", "").replace("_", "").isalnum():
        return None
    return module.replace(".", "/") + ".py"


def _kind(path: str) -> tuple[str, bool] | None:
    """(what it trains, trains) for a known entry point; None for pretrain_gpt.py."""
    base = path.rsplit("/", 1)[-1]
    if base == GPT:
        return None
    for suffix, what, trains in ENTRIES:
        if path == suffix or path.endswith("/" + suffix) or (("/" not in suffix) and base == suffix):
            return what, trains
    return "a program mtk import does not know", False


def find(script: Script, source: str) -> list[Training]:
    """The pretrain_gpt.py commands the script runs (several when undecided conditions lead to different ones);
    an argument list when the text runs no program (empty: the caller reads the arguments alone)."""
    found: list[tuple[Command, int, str]] = []
    for command in script.commands:
        if command.delegated:
            continue
        for i, word in enumerate(command.words):
            entry = _entry_of(word) or _module(command.words, i)
            if entry is not None:
                found.append((command, i, entry))
                break
    gpt = [(c, i, e) for c, i, e in found if _kind(e) is None]
    others = [(c, i, e) for c, i, e in found if _kind(e) is not None]
    training_others = [(c, i, e) for c, i, e in others if _kind(e)[1]]  # type: ignore[index]
    if training_others:
        command, _, entry = training_others[0]
        what, _ = _kind(entry)  # type: ignore[misc]
        both = "" if not gpt else f"; depending on {'; '.join(command.when)} it runs pretrain_gpt.py instead" \
            if command.when else f"; it runs pretrain_gpt.py too (line {gpt[0][0].line})"
        raise NotGpt(f"{source}: line {command.line}: {entry.rsplit('/', 1)[-1]} trains {what}; {WHAT_MTK_TRAINS}, "
                     f"so only a pretrain_gpt.py command imports{both}")
    if gpt:
        return [Training(c, (*c.wrapper, *c.words[:i]), e, c.words[i + 1:]) for c, i, e in gpt]
    if others:
        command, _, entry = others[0]
        what, _ = _kind(entry)  # type: ignore[misc]
        raise NotGpt(f"{source}: line {command.line}: the script runs {entry.rsplit('/', 1)[-1]} ({what}), not "
                     f"pretrain_gpt.py; {WHAT_MTK_TRAINS}")
    return []


def no_training_command(script: Script, source: str) -> NotGpt:
    """Why no pretrain_gpt.py command was found: the programs only running could name, what was not read."""
    reasons: list[str] = []
    for command in script.commands:
        first = command.words[0] if command.words else None
        if first is not None and not first.known and not command.delegated:
            reasons.append(f"line {command.line} runs {first.text}, which only running can tell "
                           f"({'; '.join(first.unknown)[:160]})")
    for command in script.commands:
        files = [w.text for w in command.words[1:] if w.known and w.text.endswith((".sh", ".sbatch", ".slurm"))]
        if files and not command.delegated:
            reasons.append(f"line {command.line} runs {files[0]}, another file (import that one)")
    reasons += script.unread[:3]
    reasons += script.exits[:2]
    why = "; ".join(reasons[:4]) if reasons else "the script runs no pretrain_gpt.py command"
    return NotGpt(f"{source}: no pretrain_gpt.py command to import: {why}")
