"""The bash reader behind ``mtk import`` (launcher/shell_script.py, shell_expand.py) builds the words bash would
pass, from the script alone: arrays quoted and unquoted, defaults, arithmetic, if/else, continuations, comments —
and names what the script leaves unknown instead of guessing it."""

from __future__ import annotations

from mtk.launcher.shell_script import read


def _last(text: str) -> list[str]:
    return [w.text for w in read(text).commands[-1]]


def test_quoted_array_keeps_elements_unquoted_array_splits_them():
    text = 'A=("--split 9,1,0" --lr "1e-4")\nrun "${A[@]}"\nrun ${A[@]}\n'
    script = read(text)
    assert [w.text for w in script.commands[0]] == ["run", "--split 9,1,0", "--lr", "1e-4"]
    assert [w.text for w in script.commands[1]] == ["run", "--split", "9,1,0", "--lr", "1e-4"]


def test_append_declare_and_comments_inside_arrays():
    text = ("declare -a X=(\n  --a 1   # first\n\n  --b\n)\nX+=(--c 3)  # more\n"
            "# cmd --not-this\ncmd ${X[@]} \\\n  --d 4\n")
    assert _last(text) == ["cmd", "--a", "1", "--b", "--c", "3", "--d", "4"]


def test_defaults_positional_arguments_and_arithmetic():
    script = read(': "${N:=4}"\nG=8\nP=${1:-"/ck pt"}\nrun --n $N --world $(($N*$G)) --p "$P" --q ${Q:-x}\n')
    words = script.commands[-1]
    assert [w.text for w in words] == ["run", "--n", "4", "--world", "32", "--p", "/ck pt", "--q", "x"]
    assert "$N is not set in the script: its default '4' was used" in words[2].assumed
    assert any("argument 1" in a for a in words[6].assumed)
    assert not any(w.unresolved for w in words)


def test_what_the_script_cannot_know_is_named_not_guessed():
    words = read("run --nnodes=$SLURM_NNODES --host $(hostname) --n $((SLURM_NNODES*8)) --here $(pwd)/x\n").commands[0]
    by = {w.text: w for w in words}
    assert by["--nnodes=$SLURM_NNODES"].unresolved == ("$SLURM_NNODES",)
    assert by["$(hostname)"].unresolved == ("$(hostname)",)  # never run
    assert by["$((SLURM_NNODES*8))"].unresolved == ("$SLURM_NNODES",)
    assert by["./x"].unresolved == () and by["./x"].assumed  # $(pwd): the directory it runs from, said


def test_if_else_follows_decidable_conditions_and_says_when_it_cannot():
    text = ('T=MOCK\nif [[ "$T" == "MOCK" ]] || [[ -z "$T" ]]; then\n  A=(--mock-data)\n'
            'else\n  A=(--data-path $T)\nfi\n'
            'if [ $NODES -le 4 ]; then\n  B=1\nelse\n  B=2\nfi\nrun ${A[@]} --b $B\n')
    script = read(text)
    assert [w.text for w in script.commands[-1]] == ["run", "--mock-data", "--b", "1"]
    assert script.notes == ["condition `[ $NODES -le 4 ]` cannot be decided from the script; read as true"]


def test_sbatch_lines_and_exports_are_collected():
    script = read("#!/bin/bash\n#SBATCH --nodes=2  # two\n#SBATCH -J x\nexport NCCL_DEBUG=INFO\nrun\n")
    assert script.sbatch == ["--nodes=2  # two", "-J x"]
    assert script.exports == {"NCCL_DEBUG": "INFO"}
