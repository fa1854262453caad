"""Hostile values (spaces, quotes, $(), backticks, newlines, ;, #, %) reach the job verbatim and never run.

The rendered train.sbatch is executed by bash with stand-in Slurm commands (srun, scontrol, squeue, sbatch,
scancel) on PATH: the stand-in srun runs the per-node command like a node would, which activates a venv whose
path is hostile too and records what ``mtk-entrypoint`` received. #SBATCH values are read back with a model of
sbatch's own parser (checked against the real sbatch in tests/integration/slurm).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import yaml
from hypothesis import HealthCheck, Phase, assume, example, given, settings
from hypothesis import strategies as st
from mtk.slurm.quoting import directive_value, sh
from mtk.slurm.render import render
from support.sbatch import parse_directive_value

from mtk.spec import Job

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
CANARY = "/tmp/mtk-slurm-quoting-canary"
FRAGMENTS = [f"$(touch {CANARY})", f"`touch {CANARY}`", f";touch {CANARY};", "'", '"', "\\", " ", "\t", "#",
             "%j", "%%", "$HOME", "${PATH}", "!", "*", "?", "~", "&&", "|", ">", "<", "(", ")", "{", "}", "\u00e9",
             "\U0001f600", "-", "--x", "=", ","]
LINE_BREAKS = ["\n", "\r\n", "\r"]


def hostile(with_newlines: bool, no_slash: bool = False) -> st.SearchStrategy[str]:
    chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/" if no_slash else "\x00")
    pieces = st.sampled_from(FRAGMENTS + (LINE_BREAKS if with_newlines else [])) | st.text(chars, max_size=4)
    text = st.lists(pieces, min_size=1, max_size=6).map("".join)
    if not with_newlines:
        text = text.filter(lambda s: "\n" not in s and "\r" not in s)
    return text.filter(lambda s: s.strip() != "" and "\x00" not in s)


STUBS = {
    # A node: record srun's argv and env, skip srun's options, run the per-node command.
    "srun": 'printf "%s\\0" "$@" >"$STUB_OUT/srun.argv"\n'
            'while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done\nexec "$@"\n',
    "scontrol": 'if [ "$1 $2" = "show hostnames" ]; then printf "node1\\nnode2\\n"; fi\n'
                'printf "%s\\0" "$@" >>"$STUB_OUT/scontrol.argv"\n',
    "squeue": "exit 0\n",
    "sbatch": "echo 99\n",
    "scancel": 'printf "%s\\0" "$@" >>"$STUB_OUT/scancel.argv"\n',
}
ACTIVATE = 'export PATH="$(dirname "${BASH_SOURCE[0]}"):$PATH"\nexport MTK_TEST_ACTIVATED=1\n'
ENTRYPOINT = '#!/bin/bash\nprintf "%s\\0" "$@" >"$STUB_OUT/entry.argv"\nenv -0 >"$STUB_OUT/entry.env"\nexit 0\n'


def _write_exe(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body if body.startswith("#!") else "#!/bin/bash\n" + body)
    path.chmod(0o755)


def _nul_list(path: Path) -> list[str]:
    return path.read_bytes().decode().split("\0")[:-1]


def _env(path: Path) -> dict[str, str]:
    return dict(item.split("=", 1) for item in _nul_list(path) if "=" in item)


def _run_script(tmp: Path, run_leaf: str, venv_leaf: str, env_value: str, partition: str, account: str):
    base = yaml.safe_load((EXAMPLES / "tiny-slurm.yaml").read_text())
    run_dir = str(tmp / "runs" / run_leaf)
    venv = str(tmp / "venvs" / venv_leaf)
    base["cluster"]["env"] = {"MTK_HOSTILE": env_value}
    base["cluster"]["slurm"].update(venv=venv, partition=partition, account=account)
    base["cluster"]["runs_dir"] = str(tmp / "runs")
    base["train"]["checkpoint"]["dir"] = str(tmp / "ckpt")
    job = Job.model_validate(base)
    script = render(job, run_dir).files["train.sbatch"]

    sbatch = {}
    for line in script.split("\n"):  # sbatch splits on \n only (str.splitlines would also split on \x85)
        if line.startswith("#SBATCH --") and "=" in line:
            key, _, raw = line[len("#SBATCH --"):].partition("=")
            sbatch[key] = parse_directive_value(raw)
    assert sbatch["partition"] == partition and sbatch["account"] == account
    assert sbatch["output"] == f"{run_dir}/logs/train-%j.out"

    stubs, out = tmp / "stubs", tmp / "out"
    for name, body in STUBS.items():
        _write_exe(stubs / name, body)
    _write_exe(Path(venv) / "bin" / "mtk-entrypoint", ENTRYPOINT)
    (Path(venv) / "bin" / "activate").write_text(ACTIVATE)
    out.mkdir(exist_ok=True)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    path = tmp / "train.sbatch"
    path.write_text(script)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "STUB_OUT": str(out), "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_NAME": "r-train", "SLURM_CPUS_ON_NODE": "2",
           "HOME": str(tmp)}
    done = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return run_dir, venv, out


# No shrinking: each example runs bash and a dozen stand-ins, so shrinking a failure would take minutes; the
# failing example is printed as found.
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@example(run_leaf="a b", venv_leaf="v'1", env_value="x\r\ny", partition="p\x85", account="0\x85")
@given(run_leaf=hostile(False, no_slash=True), venv_leaf=hostile(False, no_slash=True),
       env_value=hostile(True), partition=hostile(False), account=hostile(False))
def test_hostile_values_reach_the_node_verbatim(tmp_path_factory, run_leaf, venv_leaf, env_value, partition,
                                                 account):
    assume(run_leaf not in (".", "..") and venv_leaf not in (".", "..") and "%" not in run_leaf)
    assume(":" not in venv_leaf)  # refused by render: ':' would split PATH on activation
    assume(len(run_leaf.encode()) < 200 and len(venv_leaf.encode()) < 200)
    Path(CANARY).unlink(missing_ok=True)
    tmp = tmp_path_factory.mktemp("q")
    run_dir, venv, out = _run_script(tmp, run_leaf, venv_leaf, env_value, partition, account)

    argv = _nul_list(out / "entry.argv")
    assert argv == ["train", "--job", f"{run_dir}/job.json", "--run-dir", run_dir]
    env = _env(out / "entry.env")
    assert env["MTK_HOSTILE"] == env_value
    assert env["MTK_VENV"] == venv and env["MTK_TEST_ACTIVATED"] == "1"
    assert env["MTK_RUN_DIR"] == run_dir and env["MTK_RDZV_PORT"].isdigit()
    assert (Path(run_dir) / "state" / "final").read_text() == "completed\n"
    assert not os.path.exists(CANARY), "a value was executed"


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")))
def test_sh_round_trips_through_bash(value):
    out = subprocess.run(["bash", "-c", f"printf '%s' {sh(value)}"], capture_output=True, timeout=10)
    assert out.stdout.decode() == value
    assert "\r\n" not in sh(value), "sbatch refuses scripts containing CR LF"


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\n\r"), min_size=1))
def test_directive_value_round_trips_through_sbatchs_parser(value):
    assert parse_directive_value(directive_value(value, "f")) == value


def test_sh_is_plain_shlex_for_printable_values():
    assert sh("a b") == shlex.quote("a b") and sh(True) == "1" and sh(3) == "3"
    assert sh("a\nb") == "$'a\\012b'"
