"""The bash reader (launcher/bash_reader) against bash itself: the words it says a command gets are the words bash
passes (each case is run by the real bash with the command replaced by a printer), the scripts ``bash -n`` refuses
are refused with bash's message and line, and what only running could tell is named, never guessed."""

from __future__ import annotations

import subprocess

import pytest
from mtk.launcher.bash_reader import BashReadError, BashSyntaxError, read
from mtk.launcher.cli import main

from mtk.exitcodes import BadInput

PROBE = "argv_probe"
# bash's own answer: each call prints its arguments NUL-separated, then a line end
PRINTER = f'{PROBE}() {{ for a in "$@"; do printf "%s\\0" "$a"; done; printf "\\1\\n"; }}\n'

CASES = {
    "quotes": 'argv_probe "a \\\nb" \'c d\' $\'e\\tf\\x41\\101\\u00e9\' "g"\'h\'$\'i\' \\"j\\\' "\\$k\\`"',
    "splitting": 'X="1  2\t3"\nE=""\nargv_probe $X "$X" x$X "" $E "$E" ${E:+z} x${E}y\n',
    "arrays": 'A=("a b" c "" d)\nargv_probe "${A[@]}" ${A[@]} "${A[*]}" ${#A[@]} "${A[1]}" "x${A[@]}y"\n',
    "append": 'declare -a A=(1)\nA+=(2 "3 4")\nS=x\nS+=y\nA[7]=z\nargv_probe "${A[@]}" $S ${!A[@]}\n',
    "defaults": 'argv_probe "${U:-dflt}" "${U-x}" "${E:=set}" "$E" "${E:+alt}" "${N:-a b}" ${N:-c d}\n',
    "arithmetic": 'N=3\nargv_probe $((N*8+1)) $(( (N+1)**2 )) $((7/2)) $((-7%3)) $((1<<4)) $((N>2?10:20)) $((0x10))\n',
    "operators": 'P=/a/b/c.tar.gz\nargv_probe ${P##*/} ${P%%.*} ${P#*/} ${P%.*} ${P/b/B} ${P//\\//_} ${#P} ${P:3:4} '
                 '${P: -6} ${P^^} "${P/#\\/a/X}" "${P/%gz/zip}"\n',
    "conditions": 'T=bf16\nif [[ $T == fp8 ]]; then argv_probe a; elif [ "$T" = bf16 ] && [[ -n $T ]]; then '
                  'argv_probe b; else argv_probe c; fi\n[[ 10 -gt 9 && ! -z x ]] && argv_probe d\n'
                  '[ 1 -eq 2 -o x != y ] && argv_probe e\n[[ (a < b) || -v T ]] && argv_probe f\n',
    "case": 'S=large\ncase $S in\n  sm*|tiny) argv_probe s ;;\n  l*) argv_probe l ;;&\n  *) argv_probe any ;;\nesac\n',
    "functions_loops": 'f() { local x=$1; argv_probe "$x" "$#"; return 3; }\nfor i in 1 2 "3 4"; do f "$i" extra; '
                       'done\nx=outer\nf y\nargv_probe "$x" $?\n',
    "positional": 'set -- a "b c" d\nshift\nargv_probe "$@" "$#" "$*"\n',
    "continued_strings": 'ARGS="\n  --num-layers 2 \\\n  --hidden-size 64 \\\n"\n'
                         'B=(--x 1 # a comment\n   --y "2 \\\n3")\nargv_probe $ARGS "${B[@]}" ${B[@]}\n',
    "quotes_in_values": 'X=\'a"b\'\nargv_probe "$X" "${X//\\"/Q}" "\'$X\'" \'$X\' "${X:-\'q\'}"\n',
    "indirect_case": 'V=hello\nR=V\nargv_probe ${!R} ${V^} ${V^^} ${V,,}\n',
    "loops": 'i=0\nwhile [ $i -lt 3 ]; do argv_probe $i; i=$((i+1)); done\nuntil [ $i -eq 0 ]; do i=$((i-1)); '
             '[ $i -eq 1 ] && continue; argv_probe u$i; done\nfor ((k=0; k<2; k++)); do argv_probe k$k; done\n'
             'for w in a b c; do [ $w = b ] && break; argv_probe $w; done\n',
    "braces_old_arithmetic": 'A=1\nargv_probe $[A+2] "{a,b}" {a","b} ${X:-{a,b}} {} x{y}\n',
    "assignments": 'X=1 Y=$X\nZ=${Y}0\nexport W="$Z $X"\nreadonly R=r\nargv_probe "$W" $R $((Z+Y))\n',
    # declare -i: every later assignment evaluates (+= adds), arrays' elements too, a local starts without it
    "integer_attribute": 'declare -i N=2+3\nN=4*5\nM=N+1\nN+=7\nf() { local -i k=3*3; k+=1; local N=1+1; '
                         'argv_probe $k $N; }\nf\ndeclare -ai A=(1+1 2*3)\nA+=(5-1)\nA[5]=2**3\nA[0]+=10\n'
                         'X=3+4\ndeclare -i X\nY=$X\nX=1+1\ndeclare +i X\nX+=1\nargv_probe $N $M "${A[@]}" $Y $X\n'
                         'typeset -i T\nfor T in 1+1 6/2; do argv_probe $T; done\nN=7\n((N+=1))\nargv_probe $N\n',
    "declare_in_a_function": 'f() { declare X=in; declare -r R=1; typeset -i N=1+1; declare -g G=g; argv_probe $X '
                             '$R $N; }\nX=out\nf\nf\nargv_probe "$X" $G\n',
    "set_options": 'set -- p q\nset -euo pipefail\nset -e\nset +x -o errexit\nargv_probe "$@" "$#"\n',
    "readonly_unset": 'readonly R=1\nunset R\nargv_probe "$R" $?\n',
}


def _bash_words(text: str, tmp_path) -> list[list[str]]:
    script = tmp_path / "case.sh"
    script.write_text(PRINTER + text)
    out = subprocess.run(["bash", str(script)], capture_output=True, timeout=60, check=True).stdout.decode()
    return [line.split("\0")[:-1] for line in out.split("\1\n")[:-1]]


def _our_words(text: str) -> list[list[str]]:
    calls = [c for c in read(text).commands if c.words and c.words[0].text == PROBE]
    for call in calls:
        assert all(w.known for w in call.words), call
        assert not call.when, call  # every condition here is decided from the script
    return [[w.text for w in call.words[1:]] for call in calls]


@pytest.mark.parametrize("case", sorted(CASES))
def test_words_are_the_words_bash_passes(case, tmp_path):
    text = CASES[case]
    expected = _bash_words(text, tmp_path)
    assert expected, "the case calls the probe"
    assert _our_words(text) == expected


BROKEN = [
    'a=1\necho "abc\nb\nc\n', "a=1\necho 'abc\nb\n", "if true; then\necho\n\n", "echo\nfi\n", "echo $(foo\nbar\n",
    "echo `foo\nbar\n", "echo ${A\nb\n", "for x in a; do\necho\n", "case x in\na) ;;\n", "echo )\n", "A=(1 2\n3\n",
    "if true then\nfi\n", "echo $((1+\n", "f() {\necho\n", "{ echo; \n", 'echo "$(echo ")\n',
    "while true; do echo; done; done\n", "if true; then\necho", 'echo "abc', "echo a\n;;\n", "echo a |\n",
    "&& echo\n", "f() echo\n", "if ; then echo; fi\n", "if true; then fi\n", "{ }\n", "echo a >\n",
    "case a in a) echo\n", "A=(a (b))\n", 'echo ${A:-"x}\nb\n', "echo $'abc\n", "until false\ndo echo\n",
    "echo $(if true; then echo)\n", "( echo\n", "echo a && \n", "echo ;; \n",
    'torchrun pretrain_gpt.py --lr 1e-3 \\\n  --train-iters "100 \\\n  --bf16\n',
]


@pytest.mark.parametrize("text", BROKEN, ids=range(len(BROKEN)))
def test_a_script_bash_n_refuses_is_refused_with_its_message_and_line(text, tmp_path):
    script = tmp_path / "broken.sh"
    script.write_text(text)
    bash = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=60)
    assert bash.returncode != 0
    with pytest.raises(BashSyntaxError) as caught:
        read(text, source=str(script))
    assert str(caught.value) == bash.stderr.splitlines()[0]
    assert isinstance(caught.value, BadInput) and "\n" not in str(caught.value)


def test_a_script_bash_n_accepts_is_read(tmp_path):
    from pathlib import Path

    fixtures = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "megatron_import").iterdir())
    texts = [f.read_text() for f in fixtures] + list(CASES.values()) + [
        "echo ${A:-$(echo \"}\")}\n", "A=(a\n# c )\n b)\n", "echo `echo $(`\n", "cat <<EOF\n$(\nEOF\n",
        "for ((i=0;i<3;i++)); do echo; done\n", "select x in a b; do echo; done\n", "[[ -z a \n]]\n",
        "for 1 in a; do echo; done\n", "x() { echo; }\n", "echo $\"hi\" $'a\\\\'\n", "cmd 2>&1 | tee log &\nwait\n"]
    for i, text in enumerate(texts):
        script = tmp_path / f"ok{i}.sh"
        script.write_text(text)
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True, timeout=60).returncode == 0, text
        read(text, source=str(script))


def _word(text: str, flag: str):
    for command in read(text).commands:
        words = list(command.words)
        for i, w in enumerate(words[:-1]):
            if w.text == flag:
                return words[i + 1]
    raise AssertionError(f"{flag} not passed")


def test_what_only_running_could_tell_is_named_with_its_line_never_run(tmp_path):
    marker = tmp_path / "ran"
    text = (f"HOST=$(hostname; touch {marker})\nWHEN=`date; touch {marker}`\n"
            f"run --host \"$HOST\" --when $WHEN --here $(pwd)/x --n $((SLURM_NNODES*8)) --nodes $SLURM_NNODES\n")
    host = _word(text, "--host")
    assert not host.known and "(line 1): only running the script can tell its output" in host.unknown[0]
    assert host.unknown[0].startswith("$(hostname; touch")
    when = _word(text, "--when")
    assert not when.known and when.splits and "(line 2)" in when.unknown[0]  # unquoted: may be several words
    assert "$SLURM_NNODES is not set in the script" in _word(text, "--n").unknown[0]
    assert _word(text, "--nodes").unknown == ("$SLURM_NNODES (line 3): SLURM_NNODES is not set in the script (it "
                                              "comes from where the script runs)",)
    assert not marker.exists()  # nothing was run


def test_source_eval_and_functions_outputs_make_what_follows_unknown():
    text = ("A=1\nsource conf.sh\nB=2\nrun --a $A --b $B\neval \"C=3\"\nrun --b2 $B\nf() { echo 4; }\nD=$(f)\n"
            "run --d $D\n")
    script = read(text)
    assert "may be set by `source conf.sh` (line 2)" in _word(text, "--a").unknown[0]
    assert _word(text, "--b").text == "2"  # set after the source: known again
    assert "may be set by `eval \"C=3\"` (line 5)" in _word(text, "--b2").unknown[0]
    assert "only running the script can tell its output" in _word(text, "--d").unknown[0]
    assert [line.split(":")[0] for line in script.unread] == ["line 2", "line 5"]


def test_what_the_reader_does_not_read_is_unknown_not_read_as_written():
    """Brace expansion makes several words of one: read as written it would be one, so it is an unknown."""
    word = read("A=1\nrun --data-path /d/{web,code}_text_document x{$A,b}\n").commands[0].words[2]
    assert not word.known and word.splits and word.unknown[0].endswith("brace expansion is not read by mtk import")


def test_conditions_only_running_decides_are_followed_both_ways():
    text = ('A=(--x 1)\nif [ -f /etc/mtk-flag ]; then A+=(--y 2); fi\nif [ -n "$HOME" ]; then Z=1; else Z=1; fi\n'
            'run "${A[@]}" --z $Z\n')
    calls = read(text).commands
    assert sorted([w.text for w in c.words] for c in calls) == [["run", "--x", "1", "--y", "2", "--z", "1"],
                                                               ["run", "--x", "1", "--z", "1"]]
    assert {c.when for c in calls} == {("`[ -f /etc/mtk-flag ]` (line 2) is true",),
                                       ("`[ -f /etc/mtk-flag ]` (line 2) is false",)}  # the $HOME ways agree


def test_a_default_that_decides_a_condition_is_said():
    script = read('T=${1:-MOCK}\nif [[ "$T" == MOCK ]]; then run --mock-data; else run --data-path "$T"; fi\n')
    assert [[w.text for w in c.words] for c in script.commands] == [["run", "--mock-data"]]
    assert script.notes == ["`[[ \"$T\" == MOCK ]]` (line 2) read as true: ${1:-MOCK} (line 1): the script's argument "
                            "1 is not set in the script; its default 'MOCK' was used"]


def test_the_scripts_arguments_are_read_as_bash_gets_them():
    text = 'run --save "$1" --n $# --rest "${@:2}"\n'
    assert not _word(text, "--save").known  # not given: the user has to say
    given = read(text, args=["/ck pt", "a", "b"]).commands[0]
    assert [w.text for w in given.words] == ["run", "--save", "/ck pt", "--n", "3", "--rest", "a", "b"]


def test_a_here_document_and_bash_c_are_read_as_the_scripts_they_are():
    text = ('export EXTRA=--bf16\nCMD="python /opt/pretrain_gpt.py --lr 3e-4 \\${EXTRA}"\n'
            'sbatch <<EOF\n#!/bin/bash\n#SBATCH --nodes=2\nsrun -l bash -c "${CMD}"\nEOF\n')
    inner = [c for c in read(text).commands if not c.delegated]  # $EXTRA expands in the child: it is exported
    assert [w.text for w in inner[0].words] == ["python", "/opt/pretrain_gpt.py", "--lr", "3e-4", "--bf16"]
    assert inner[0].sbatch == ("--nodes=2",) and [w.text for w in inner[0].wrapper] == ["srun", "-l"]
    assert "`bash -c`" in inner[0].via and "here-document" in inner[0].via


READONLY = ["readonly R=1\nR=2\necho $R\n", "declare -r R=1\nR+=2\n", "readonly R=1\nf() {\n  local R=2\n}\nf\n",
            "readonly R=1\n((R=3))\n", "readonly R=1\nfor R in a; do :; done\n", "typeset -r R\nR=x\n",
            "readonly R=1\nif true; then\n  echo ${R:=x} ${U:=y}\n  R=3\nfi\n"]


@pytest.mark.parametrize("text", READONLY, ids=range(len(READONLY)))
def test_an_assignment_bash_refuses_as_readonly_is_refused_at_its_line(text, tmp_path):
    """bash refuses the assignment and abandons the rest of the command it is in (a whole ``if``, a function
    call): the reader does not follow that half-run, it names the line."""
    script = tmp_path / "ro.sh"
    script.write_text(text)
    bash = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert "readonly variable" in bash.stderr
    line = int(bash.stderr.split(": line ", 1)[1].split(":", 1)[0])
    with pytest.raises(BashReadError) as caught:
        read(text, source="ro.sh")
    assert str(caught.value).startswith(f"ro.sh: line {line}: R is readonly: bash refuses this assignment")


def test_a_name_reference_is_refused_by_name(tmp_path, capsys):
    """``declare -n R=V``: assigning R sets V. Not read: refused with the line, never read as a plain variable (V
    kept its old value there: an import of another learning rate)."""
    text = "LR=1e-3\ndeclare -n REF=LR\nREF=3e-4\ntorchrun pretrain_gpt.py --lr $LR\n"
    script = tmp_path / "ref.sh"
    script.write_text(text.replace("torchrun pretrain_gpt.py", "echo"))
    assert subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60).stdout == "--lr 3e-4\n"
    for declared in (text, text.replace("declare -n REF=LR\n", "f() { local -n REF=$1; REF=3e-4; }\nf LR\n")):
        with pytest.raises(BashReadError) as caught:
            read(declared, source="ref.sh")
        assert "-n REF" in str(caught.value) and "a name reference" in str(caught.value)
    script.write_text(text)
    assert main(["import", str(script), "-o", str(tmp_path / "out.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {script}: line 2: declare -n REF") and "\n" not in err


def test_windows_line_endings_and_a_byte_order_mark_are_refused_with_the_fix(tmp_path, capsys):
    """bash keeps the carriage return of a CRLF line as part of its last word (Megatron-LM gets '--bf16\\r') and
    reads a byte-order mark as part of the first word: both are refused by line, with the fix, never stripped."""
    crlf = PRINTER + "A=1\nargv_probe --lr 1e-3 --bf16\n"
    assert _bash_words(crlf.replace("\n", "\r\n").replace(PRINTER.replace("\n", "\r\n"), PRINTER), tmp_path) == \
        [["--lr", "1e-3", "--bf16\r"]]
    with pytest.raises(BashReadError) as caught:
        read("A=1\ntorchrun pretrain_gpt.py --bf16\r\n", source="w.sh")
    assert str(caught.value) == ("w.sh: line 2: the line ends in a carriage return (Windows line endings): bash passes "
                                 "it as part of the last word ('--bf16\\r'); convert the file with dos2unix")
    script = tmp_path / "bom.sh"
    script.write_text("\ufeff#!/bin/bash\necho ran\n")
    bash = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert "\ufeff#!/bin/bash: No such file or directory" in bash.stderr or "command not found" in bash.stderr
    assert main(["import", str(script), "-o", str(tmp_path / "out.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {script}: line 1: the file starts with a UTF-8 byte-order mark, which bash reads as part " \
                  "of the first word; save the file without it (UTF-8 without BOM)"


ERREXIT = ["set -e\nargv_probe a\nfalse\nargv_probe b\n", "set -e\n[ -z x ]\nargv_probe b\n",
           "set -eu\nfalse || true\nfalse && x\nif false; then :; fi\n! true\nwhile false; do :; done\nargv_probe c\n"
           "[[ a == b ]]\nargv_probe d\n", "set -e\nf() { return 3; }\nf || argv_probe e\nf\nargv_probe f\n",
           "set -euo pipefail\ntrue && false\nargv_probe g\n",
           "set -e\nset +e\nfalse\nargv_probe h\n((0))\nset -o errexit\n((0))\nargv_probe i\n",
           "set -e\nN=1\nif [ $N = 1 ]; then\n  argv_probe j\n  false\nfi\nargv_probe k\n"]


@pytest.mark.parametrize("text", ERREXIT, ids=range(len(ERREXIT)))
def test_set_e_ends_the_script_where_bash_ends_it(text, tmp_path):
    """``set -e``: a command that fails outside a condition ends the script, so nothing after it trains (the
    reader read on); conditions, ``&&``/``||`` left sides and ``!`` do not end it."""
    script = tmp_path / "e.sh"
    script.write_text(PRINTER + text)
    out = subprocess.run(["bash", str(script)], capture_output=True, timeout=60).stdout.decode()
    expected = [line.split("\0")[:-1] for line in out.split("\1\n")[:-1]]
    assert _our_words(text) == expected
    ran_to_the_end = [text.rstrip("\n").rsplit("\n", 1)[-1].split()[-1]] in expected
    ends = read(text).exits
    assert bool(ends) != ran_to_the_end and all(e.endswith("and `set -e` ends it") for e in ends)


def test_an_associative_arrays_elements_are_unknown_never_another_elements(tmp_path):
    """``declare -A``: keys are strings (``M[x]`` is key "x", not x's value 1). Read as an indexed array, ``M[x]``
    and ``M[1]`` were one element and the script's "a" became "b"; every element is unknown, named, instead."""
    text = "declare -A M\nx=1\nM[x]=a\nM[1]=b\nargv_probe ${M[x]} ${M[1]} ${!M[@]}\ndeclare -A N=([tp]=2)\n" \
           "argv_probe ${N[tp]}\nunset N\nN=(5)\nf() { local -A L; L[a]=1; }\nf\nL[1]=2\nargv_probe ${N[0]} ${L[1]}\n"
    bash = _bash_words(text, tmp_path)
    assert bash[0][:2] == ["a", "b"] and bash[2] == ["5", "2"]
    calls = [c.words[1:] for c in read(text).commands if c.words[0].text == PROBE]
    assert [w.known for w in calls[0]] == [False, False, False] and not calls[1][0].known
    assert all("an associative array is not read by mtk import" in w.unknown[0] for w in (*calls[0], *calls[1]))
    assert [w.text for w in calls[2]] == bash[2]  # unset, or a local that ended: an indexed array again


def test_a_shell_option_that_changes_how_bash_reads_what_follows_is_refused_with_its_line(tmp_path):
    """With ``shopt -s expand_aliases`` an alias defined on one line renames the next line's command (bash runs
    pretrain_bert.py below, which the reader would take for pretrain_gpt.py); extglob, nullglob and the like change
    patterns and globbing the same way. Harmless options (checkwinsize) and queries are read on."""
    text = ("shopt -s expand_aliases\nalias python='echo pretrain_bert.py'\n"
            "python pretrain_gpt.py --lr 1\n")
    script = tmp_path / "aliased.sh"
    script.write_text(text)
    ran = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60, check=True).stdout
    assert ran.split()[0] == "pretrain_bert.py"  # what bash runs: not the command as written
    for option in ("expand_aliases", "extglob", "nullglob"):
        with pytest.raises(BashReadError, match=rf"line 1: `shopt -s {option}` changes how bash reads"):
            read(text.replace("expand_aliases", option))
    words = read("shopt -s checkwinsize\nshopt -q extglob\nrun --lr 1\n").commands[-1].words
    assert [w.text for w in words] == ["run", "--lr", "1"]
