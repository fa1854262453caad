"""Hostile and broken scripts end in one line, exit 2, with bounded memory: every bound of the bash reader
(launcher/bash_reader/limits.py) is reached by a script built to reach it, through ``mtk import`` as a user runs it.
No traceback, no killed process (the kernel killed an import at 23.7 GB before these bounds)."""

from __future__ import annotations

import contextlib
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mtk.launcher.bash_reader import BashReadError, read
from mtk.launcher.bash_reader.limits import MAX_INPUT_BYTES, MAX_NESTING
from mtk.launcher.cli import main
from mtk.launcher.megatron_import import import_text

from mtk.exitcodes import BadInput

DOUBLED = "X=x\n" + 'X="$X$X"\n' * 20  # 1 MiB
ARRAY = "A=(" + "x" * 64 + ")\n" + 'A=("${A[@]}" "${A[@]}")\n' * 13  # 8,192 elements of 64 characters
HOSTILE = {
    "nested_defaults": ("echo " + "${A:-" * 400 + "x" + "}" * 400 + "\n",
                        f"line 1: blocks, substitutions or quotes nested deeper than {MAX_NESTING} levels"),
    "nested_ifs": ("if true; then\n" * 5000 + "echo\n" + "fi\n" * 5000,
                   f"line {MAX_NESTING}: blocks, substitutions or quotes nested deeper than {MAX_NESTING} levels"),
    "nested_substitutions": ("echo " + '"$(' * 2000 + "\n", "nested deeper than"),
    "nested_arithmetic": ("echo $((" + "(" * 3000 + "1" + ")" * 3000 + "))\n", "nested deeper than"),
    "doubling_value": ("A=x\n" + 'A="$A$A"\n' * 40 + "pretrain_gpt.py --lr $A\n",
                       "line 22: a value grows past 1024 KiB (2,097,152 characters)"),
    "doubling_array": ("A=(x)\n" + 'A=("${A[@]}" "${A[@]}")\n' * 40, "expansions pass 4 MiB together"),
    "ten_megabytes_of_flags": ("python pretrain_gpt.py " + "--num-layers 2 " * (10 * 1024 * 1024 // 15) + "\n",
                               f"mtk import reads launch scripts up to {MAX_INPUT_BYTES // 1024} KiB"),
    "endless_loop": ("while true; do X=1; done\npython pretrain_gpt.py --lr 1\n",
                     "no pretrain_gpt.py command to import: the loop at line 1 never ends"),
    "counting_loop": ("for ((i=0; i<100000000; i++)); do :; done\n", "line 1: the loop runs more than 1000 turns"),
    "recursion": ("f() { f; }\nf\n", "line 1: functions call each other deeper than"),
    "unterminated_quote": ('A=1\npython pretrain_gpt.py --lr "1e-3 \\\n --bf16\n',
                           "line 2: unexpected EOF while looking for matching `\"'"),
    # each expansion is bounded while it is built, never after: ${X//?/$X} of a 40 KB value is 1.6 GB
    "squared_replacement": ("X=" + "a" * 40_000 + "\nX=${X//?/$X}\npretrain_gpt.py --lr $X\n",
                            "line 2: a value grows past 1024 KiB (1,079,974 characters)"),
    "replacement_of_a_replacement": ("X=" + "a" * 1000 + "\nX=${X//?/$X}\nX=${X//?/$X}\n",
                                     "line 3: a value grows past 1024 KiB (1,999,999 characters)"),
    "repeated_in_one_word": (DOUBLED + 'Y="' + "$X" * 200 + '"\n', "line 22: a value grows past 1024 KiB"),
    "array_repeated_in_one_word": (ARRAY + 'Y="' + "${A[@]}" * 50 + '"\n',
                                   "line 15: the script's expansions pass 4 MiB together"),
    "array_spread_in_one_word": (ARRAY + "run " + '"${A[@]}"' * 50 + "\n",
                                 "line 15: the script's expansions pass 4 MiB together"),
    "joined_array": (ARRAY + 'Y="${A[*]}${A[*]}"\n', "line 15: a value grows past 1024 KiB (1,064,958 characters)"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_script_ends_in_one_line_exit_2(case, tmp_path, capsys):
    text, said = HOSTILE[case]
    script = tmp_path / f"{case}.sh"
    script.write_text(text)
    assert main(["import", str(script), "-o", str(tmp_path / "out.yaml")]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {script}: ") and said in lines[0], captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    assert not (tmp_path / "out.yaml").exists()


@pytest.mark.parametrize("case", ["doubling_value", "doubling_array", "nested_ifs", "ten_megabytes_of_flags",
                                  "squared_replacement", "replacement_of_a_replacement", "repeated_in_one_word",
                                  "array_repeated_in_one_word", "array_spread_in_one_word", "joined_array"])
def test_memory_stays_bounded(case):
    text, _ = HOSTILE[case]
    tracemalloc.start()
    try:
        with pytest.raises(BashReadError):
            read(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 128 * 1024 * 1024, f"{peak / 2**20:.0f} MiB"


def test_a_pattern_built_to_be_slow_is_matched_in_bounded_work():
    """A backtracking matcher takes exponential time on ``*a*a*...b``; the reader's walks the text once per pattern
    token, gives bash's answer, and past its work bound says the value is unknown instead of stalling."""
    subject = "a" * 4000
    cheap = read(f"X={subject}\nY=${{X##{'*a' * 60}b}}\nrun --y $Y\n").commands[0].words[2]
    assert cheap.known and cheap.text == subject  # no match: bash leaves the value as it is
    costly = read(f"X={subject}\nY=${{X##{'*a' * 300}b}}\nrun --y $Y\n").commands[0].words[2]
    assert not costly.known and "a pattern too costly to match" in costly.unknown[0]


def test_arithmetic_on_long_constants_wraps_as_bash_does(tmp_path):
    """A 5,000-digit constant is read digit by digit into 64 bits (it was a ValueError traceback: Python refuses
    to convert more than 4,300 digits), and ``$((64#...))`` over 50,000 digits takes no bignum."""
    import subprocess

    text = "X=$(( " + "1" * 5000 + " ))\nY=$(( 64#" + "z_@" * 20_000 + " ))\nrun --x $X --y $Y\n"
    script = tmp_path / "long.sh"
    script.write_text(text.replace("run ", "printf '%s\\n' "))
    bash = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60, check=True).stdout
    words = [w.text for w in read(text).commands[0].words]
    assert words[1:] == bash.split()


def test_case_changes_beyond_ascii_are_unknown_not_guessed():
    """bash changes the case of other letters by the locale the script runs in (``${X^^}`` of "ß" or "é"); ASCII
    is the same in every locale."""
    words = read("A=straße\nB=bf16\nrun ${A^^} ${B^^} ${A^} ${B@U}\n").commands[0].words
    assert not words[1].known and "depends on the locale" in words[1].unknown[0]
    assert [w.text for w in words[2:]] == ["BF16", "Straße", "BF16"]


def test_thousands_of_flags_mtk_cannot_honour_are_summed_up_not_all_printed(tmp_path, capsys):
    from mtk.launcher.cli.import_args import SHOWN

    script = tmp_path / "generated.sh"
    script.write_text("python pretrain_gpt.py " + " ".join(f"--fake-{i} 1" for i in range(5000)) + "\n")
    assert main(["import", str(script)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == SHOWN + 2 and lines[SHOWN] == "  ... and 4964 more"  # 5,000 + the 4 required flags
    assert lines[-1].endswith(",... (all 5004)")


SHELL_PIECES = ["$", "{", "}", "(", ")", "[", "]", '"', "'", "`", "\\", "\n", " ", ";", "&", "|", "<", ">", "#", "=",
                "-", "*", "?", "!", ":", "%", "/", "^", ",", "~", "0", "7", "a", "X", "$(", "${", "$((", "<<EOF\n",
                "\nEOF\n", "if ", " then ", " fi", "case ", " in ", ";;", " esac", " do ", " done", "for ", "while ",
                "\\\n", "--lr ", "pretrain_gpt.py ", "A=(", "${A[@]}", "f() { ", "source x; ", "$'\\x41'"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(SHELL_PIECES), max_size=60))
def test_any_text_is_read_or_refused_in_one_line_never_a_crash(pieces):
    """The reader and the import on text made of bash's special pieces: a Script, or a BadInput — never another
    exception (a traceback is a bug: the user would see it instead of the line to fix)."""
    text = "".join(pieces)
    try:
        read(text)
    except BashReadError as exc:
        assert "\n" not in str(exc)
    with contextlib.suppress(BadInput):
        import_text(text, source="fuzz.sh")
