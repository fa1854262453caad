"""Run Megatron-LM's own ``pretrain_gpt.py`` on this CPU machine: 2 torchrun ranks, gloo (test scaffolding).

The Megatron-LM tree is a checkout (or ``git archive``) of NVIDIA/Megatron-LM; :func:`extract_tree` makes one
from the bare mirror (``/work/.mirror/NVIDIA+Megatron-LM/repo``, branch ``core_r0.19.0``). The tree's entry
scripts (``pretrain_gpt.py`` and the ``gpt_builders.py``/``model_provider.py`` it imports) are copied into the
run's folder and run there, so ``import megatron`` resolves to the megatron-core 0.19.2 wheel mtk runs
(its ``megatron/training`` is byte-identical to the tree's at core_r0.19.0; the tree's ``megatron/core``
lacks the compiled dataset helpers). Nothing of the tree is copied into this repository.

The flags are the job's (``tests/integration/training/megatron_lm/mlm_args.py``: the pretrain_gpt.py command
a user writes for the same run, no override flag) plus the kernel choices a CPU needs
(:data:`CPU_FLAGS`: the local transformer implementation and no fused kernels — none changes a checkpoint
or a loss). The CPU shim is ``megatron_lm_cpu/sitecustomize.py`` (it lists what it patches).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MIRROR = Path("/work/.mirror/NVIDIA+Megatron-LM/repo")
REF = "core_r0.19.0"
SHIM = Path(__file__).resolve().parent / "megatron_lm_cpu"
ENTRY_SCRIPTS = ("pretrain_gpt.py", "gpt_builders.py", "model_provider.py")
COMMIT_FILE = ".megatron_lm_commit"
# The mtk runs Megatron-LM is asked to continue (its loader in the default suite, pretrain_gpt.py on demand).
MTK_RUNS = {
    "plain_tp2_fp32": ("parallel.tp=2", "train.precision=fp32"),
    "distopt_dp2_bf16": ("parallel.tp=1", "parallel.distributed_optimizer=true", "train.precision=bf16"),
    "moe_ep2_fp32": ("parallel.tp=1", "parallel.ep=2", "model.moe.num_experts=4", "model.moe.router_topk=2",
                     "train.precision=fp32"),
}
CPU_FLAGS = ["--transformer-impl", "local", "--distributed-backend", "gloo", "--use-cpu-initialization",
             "--no-persist-layer-norm", "--no-gradient-accumulation-fusion", "--no-masked-softmax-fusion",
             "--no-bias-gelu-fusion", "--no-bias-swiglu-fusion", "--no-bias-dropout-fusion", "--no-rope-fusion",
             "--log-interval", "1", "--eval-iters", "0", "--eval-interval", "1000000"]


def extract_tree(dest: Path, mirror: Path = MIRROR, ref: str = REF) -> Path:
    """``git archive`` of ``ref`` from the bare mirror into ``dest`` (reused when already there)."""
    if (dest / COMMIT_FILE).exists():
        return dest
    if not (mirror / "HEAD").exists():
        raise FileNotFoundError(
            f"no Megatron-LM mirror at {mirror}: pass a Megatron-LM checkout with --megatron-lm PATH "
            f"(git clone https://github.com/NVIDIA/Megatron-LM -b {ref})")
    sha = subprocess.run(["git", "--git-dir", str(mirror), "rev-parse", f"{ref}^{{commit}}"], check=True,
                         capture_output=True, text=True).stdout.strip()
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.Popen(["git", "--git-dir", str(mirror), "archive", sha], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise RuntimeError(f"git archive {sha} from {mirror} failed")
    (dest / COMMIT_FILE).write_text(sha + "\n")
    return dest


def tree_commit(tree: Path) -> str:
    """The commit the tree was made from (written by :func:`extract_tree`, else asked of its git checkout)."""
    if (tree / COMMIT_FILE).exists():
        return (tree / COMMIT_FILE).read_text().strip()
    res = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True)
    if res.returncode != 0:
        raise ValueError(f"{tree}: not a git checkout and no {COMMIT_FILE}; cannot name the Megatron-LM commit")
    return res.stdout.strip()


def _mlm_args():
    path = REPO / "tests" / "integration" / "training" / "megatron_lm" / "mlm_args.py"
    spec = importlib.util.spec_from_file_location("mlm_args", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pretrain_gpt_argv(job, *, load: Path | None, save: Path, save_interval: int, extra: tuple = ()) -> list[str]:
    """The job's pretrain_gpt.py flags (``--load`` only when given), CPU kernel choices and ``--save``."""
    argv = _mlm_args().megatron_lm_argv(job, str(load or save))
    if load is None:
        i = argv.index("--load")
        del argv[i:i + 2]
    m = job.model
    if m.position_embedding == "rope":
        argv += ["--rotary-base", str(int(m.rotary_base))]
    if m.moe.num_experts and m.moe.ffn_hidden_size:
        argv += ["--moe-ffn-hidden-size", str(m.moe.ffn_hidden_size)]
    return [*argv, *CPU_FLAGS, "--save", str(save), "--save-interval", str(save_interval), *extra]


def argv_from_checkpoint(iter_dir: Path, root: Path, save_interval: int) -> list[str]:
    """The arguments mtk wrote beside a checkpoint (``megatron_lm_args.txt``), pointed at ``root`` (a copy of the
    run's checkpoint dir), plus the CPU kernel choices and the test's save interval."""
    from mtk.training.interop import megatron_lm

    from support.megatron_args_file import read_args_file

    argv = read_args_file((iter_dir / megatron_lm.ARGS_FILE).read_text())
    for flag, value in (("--load", str(root)), ("--save", str(root)), ("--save-interval", str(save_interval))):
        argv[argv.index(flag) + 1] = value
    return [*argv, *CPU_FLAGS]


def run_pretrain_gpt(tree: Path, argv: list[str], workdir: Path, nproc: int = 2,
                     timeout: float = 900, wrapper: tuple[str, ...] = ()) -> tuple[int, dict[int, dict]]:
    """Run the tree's pretrain_gpt.py under torchrun in ``workdir``; returns (exit code, records by
    iteration: ``lm_loss`` and any other reduced loss, full precision). The log is ``workdir/pretrain_gpt.log``.

    ``wrapper``: a script (and its arguments) torchrun starts instead, given pretrain_gpt.py's path and argv
    after them (the loop benchmark's rank-0 profiler)."""
    entry = workdir / "megatron_lm_entry"
    entry.mkdir(parents=True, exist_ok=True)
    for name in ENTRY_SCRIPTS:
        shutil.copy2(tree / name, entry / name)
    losses = workdir / "pretrain_gpt_losses.jsonl"
    losses.unlink(missing_ok=True)
    path = os.pathsep.join(p for p in (str(SHIM), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "TORCHDYNAMO_DISABLE": "1", "OMP_NUM_THREADS": "1",
           "MTK_MLM_LOSSES": str(losses)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           *wrapper, str(entry / "pretrain_gpt.py"), *argv]
    (workdir / "pretrain_gpt.cmd").write_text(" ".join(cmd[4:]) + "\n")
    with open(workdir / "pretrain_gpt.log", "w") as log:
        rc = subprocess.run(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                            timeout=timeout).returncode
    records = {}
    if losses.exists():
        for line in losses.read_text().splitlines():
            r = json.loads(line)
            records[r["iteration"]] = r
    return rc, records
