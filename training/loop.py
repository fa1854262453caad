"""The pretraining loop: build everything from the job spec, resume, train, evaluate, save, exit.

One iteration = one optimizer step over ``global_batch_size`` sequences (under ``train.batch_size_schedule`` the
batch megatron-core's ``StepBatchsizeNumMicroBatchesCalculator`` gives the samples consumed before it, as
Megatron-LM's loop asks it), split into micro-batches by megatron.core's ``get_forward_backward_func`` schedule
(1F1B with pipeline parallelism). After every
iteration all ranks do one small all-reduce that carries the loss (from the last pipeline stage) and the
run-control flags (signals, trigger files), so logging and stop/save decisions agree everywhere.

Device discipline (the same code on CPU/gloo and CUDA/NCCL): batches go to the accelerator in
``forward_step`` (then megatron-core slices them per context-parallel rank), every tensor handed to a
collective is created on the accelerator, and the loop reads device values back once per iteration (the
reduced loss/flags); step times are taken after a device synchronize.
"""

from __future__ import annotations

import os
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtk import checkpoint_paths, exitcodes
from mtk.batch_schedule import BatchSchedule

from . import compat
from .refusal import Refused, refuse_together

if TYPE_CHECKING:
    from mtk.spec import Job


class EngineError(Refused):
    """A job the engine cannot run on this machine; the message names the field and the fix."""


def _log(rank: int, msg: str) -> None:
    if rank == 0:
        print(msg, flush=True)


def preflight(job: Job, cpu: bool, use_te: bool) -> None:
    """Refuse configurations megatron.core 0.19.2 cannot run here, before any collective is built."""
    if job.parallel.cp > 1 and not use_te:
        raise EngineError(f"parallel.cp={job.parallel.cp}: context parallelism needs Transformer Engine's "
                          "attention (megatron.core's local DotProductAttention asserts cp == 1); use cp: 1 "
                          "or an image with transformer_engine")
    if job.model.attention_backend == "te" and not use_te:
        raise EngineError("model.attention_backend=te needs Transformer Engine, which does not import here; use "
                          "attention_backend: auto (torch SDPA on a GPU) or an image with transformer_engine")
    if job.train.precision == "fp8" and not use_te:
        raise EngineError("train.precision=fp8 needs Transformer Engine; use bf16 or an image with TE")
    if cpu and job.train.precision == "fp16":
        raise EngineError("train.precision=fp16 needs a GPU; use bf16 or fp32 on CPU")


def loss_func(loss_mask, output_tensor, per_token: bool = False):
    """Mean token loss of one micro-batch. The schedule divides the returned loss in place, so the
    value for logging is a detached clone.

    ``per_token`` (``train.per_token_loss``): the micro-batch's loss *sum* and its token count, as Megatron-LM's
    ``pretrain_gpt.py`` returns them; the schedule then leaves the loss undivided and ``finalize_model_grads``
    divides the gradients by the global batch's token count. Logged: ``[sum, tokens]``, so the iteration's
    loss is the token-weighted mean."""
    import torch

    losses = output_tensor.float().view(-1)
    mask = loss_mask.view(-1).float()
    total = torch.sum(losses * mask)
    if per_token:
        tokens = mask.sum()
        return total, tokens.to(torch.int), {"lm loss": torch.stack([total.detach().clone(), tokens.detach()])}
    loss = total / mask.sum().clamp(min=1)
    return loss, {"lm loss": loss.detach().clone()}


def forward_step(data_iterator, model, per_token: bool = False):
    from megatron.core import parallel_state as ps

    from .data import for_context_parallel_rank, to_device

    batch = for_context_parallel_rank(to_device(next(data_iterator)),
                                      ps.get_context_parallel_world_size())
    output = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])
    return output, partial(loss_func, batch["loss_mask"], per_token=per_token)


def _loss_sum(loss_dicts: list[dict]):
    """(sum, count) of this rank's micro-batch losses as a device tensor (zeros on non-last pipeline
    stages); no host sync. Count: micro-batches, or tokens with per-token loss (entries ``[sum, tokens]``)."""
    import torch

    vals = [d["lm loss"].float().view(-1) for d in loss_dicts if "lm loss" in d]
    total = torch.zeros(2, dtype=torch.float64, device=torch.cuda.current_device())
    if vals:
        stacked = torch.stack(vals)
        total[0] = stacked[:, 0].sum()
        total[1] = stacked[:, 1].sum() if stacked.shape[1] == 2 else len(vals)
    return total


def device_synchronize() -> None:
    """Wait for queued accelerator work (a no-op on CPU): step times must include the kernels."""
    import torch

    torch.cuda.synchronize()


class Trainer:
    """Holds the built model, optimizer, data and state of one worker process."""

    def __init__(self, job: Job, run_dir: str | Path):
        from .control import Control

        self.job = job
        self.run_dir = Path(run_dir)
        self.iteration = 0
        self.consumed = 0
        self.last_saved: int | None = None
        # Handlers go in before the slow imports and setup: a SIGUSR2 during setup must not kill the rank.
        self.control = Control(self.run_dir, int(os.environ.get("RANK", "0")))
        self.control.install()
        from .heartbeat_files import LocalFolderTaken
        from .watchdog import Heartbeat

        self.heartbeat = Heartbeat(self.run_dir, int(os.environ.get("RANK", "0")), job.resilience.watchdog)
        self.refusal: str | None = None  # found before the process group exists: every rank refuses in setup
        try:
            self.heartbeat.start()
        except LocalFolderTaken as exc:
            self.refusal = str(exc)
        from .gc_control import ManualGC

        self.gc = ManualGC(job.train.manual_gc, job.train.manual_gc_interval)

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        job = self.job
        if job.cluster.device == "cpu":
            # A CPU job on a GPU machine: hide the GPUs before torch initialises CUDA, so megatron's
            # hard-coded "cuda" tensors and the compat layer agree on one device.
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
        self.cpu = not compat.cuda_available()
        if self.cpu and job.cluster.device == "gpu":
            _log(int(os.environ.get("RANK", "0")), "[mtk] cluster.device is gpu but CUDA is not available: "
                                                   "running on CPU with gloo")
        self.strict = compat.install()  # before megatron.core is imported (see compat's module docstring)
        import torch.distributed as dist
        from megatron.core import parallel_state as ps
        from megatron.core.distributed import finalize_model_grads

        from . import checkpoint, data, debug, device_plan, distributed, init_from, metrics, model, optim

        self.use_te = device_plan.have_transformer_engine()
        preflight(job, self.cpu, self.use_te)
        distributed.init(job, self.cpu)
        refuse_together(self.refusal)
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.dp_rank = ps.get_data_parallel_rank()
        self.dp_size = ps.get_data_parallel_world_size()
        topo = checkpoint.topology(job) | {"dp": self.dp_size}
        if job.debug.env_dump:
            debug.dump_environment(self.run_dir, self.rank, topo)
        self.profiler = debug.ProfilerWindow(job.debug.torch_profiler, self.run_dir, self.rank)
        self.nsys = debug.NsysWindow(job.debug.nsys, self.rank)

        self.plan = device_plan.plan_for_here(job, gpu=not self.cpu, dp_size=self.dp_size)
        self.tok = data.tokenizer_info(job)
        self.config = model.transformer_config(job, self.plan)
        chunks = model.build_model(job, self.config, self.tok.vocab_size, self.plan)
        self.model = optim.wrap_ddp(job, self.config, chunks, self.plan)
        self.optimizer = optim.build_optimizer(job, self.model, self.plan)
        self.scheduler = optim.build_scheduler(job, self.optimizer)
        optim.set_sync_funcs(self.config, self.model, self.plan)
        self.config.finalize_model_grads_func = finalize_model_grads
        self.config.grad_scale_func = self.optimizer.scale_loss
        self.padded_vocab = model.model_vocab_size(job, self.tok.vocab_size)
        n_params = sum(p.numel() for m in self.model for p in m.parameters())
        _log(self.rank, f"[mtk] model: {job.model.arch} {job.model.num_layers} layers, hidden "
                        f"{job.model.hidden_size}, vocab {self.padded_vocab} (padded), {n_params:,} params on "
                        f"rank 0; tp={job.parallel.tp} pp={job.parallel.pp} cp={job.parallel.cp} "
                        f"ep={job.parallel.ep} dp={self.dp_size}; "
                        f"{self.plan.describe()}; {job.train.precision}; "
                        f"{'cpu/gloo' if self.cpu else 'gpu/nccl'}")
        if self.strict:
            _log(self.rank, "[mtk] strict device checks on: a host tensor reaching a model forward or an "
                            "NCCL-bound collective fails here as it would on a GPU")

        ckpt = job.train.checkpoint
        root = checkpoint_paths.checkpoint_dir(ckpt.dir, self.run_dir)
        self.ckpt = checkpoint.CheckpointManager(root, ckpt.keep_last, log=lambda m: _log(self.rank, m),
                                                 async_save=ckpt.async_save, owner=self.run_dir,
                                                 assume_constant_structure=ckpt.assume_constant_structure,
                                                 fully_parallel=ckpt.fully_parallel_save)
        self.ckpt.prepare()
        state = None
        if ckpt.load:
            state = self.ckpt.load(self.model, self.optimizer, self.scheduler, job, self.tok.vocab_size)
            if state is not None:
                self.iteration = int(state["iteration"])
                self.consumed = int(state.get("consumed_samples", 0))
                self.last_saved = self.iteration
                _log(self.rank, f"[checkpoint] resumed from {state['path']} at iteration {self.iteration}, "
                                f"consumed samples {self.consumed}")

        if job.train.init_from and self.last_saved is None:  # a new run (nothing resumed): copy the weights
            init_from.initialize_from(job.train.init_from, self.model, self.optimizer, job, self.padded_vocab,
                                       log=lambda m: _log(self.rank, m))
        self.tokenizer_record = self._tokenizer_record(state["path"] if state else None)

        train_ds, valid_ds = data.build_datasets(job, self.tok, log=lambda m: _log(self.rank, m),
                                                 run_dir=str(self.run_dir))
        self.train_sampler = data.ResumableSampler(len(train_ds), self.consumed, job.train.micro_batch_size,
                                                   self.dp_rank, self.dp_size)
        self.train_iter = data.batches(train_ds, self.train_sampler, job.data.num_workers,
                                       pin_memory=not self.cpu)
        self.valid_iter = (data.cyclic_batches(valid_ds, job.train.micro_batch_size, self.dp_rank, self.dp_size)
                           if valid_ds is not None and len(valid_ds) and job.train.eval_interval else None)
        self.metrics = metrics.MetricsWriter(job, self.run_dir, self.rank, self.world, self.padded_vocab,
                                             tensorboard=job.train.tensorboard)
        from .stragglers import StragglerStats

        self.stragglers = StragglerStats(job.resilience.stragglers, self.run_dir, self.rank, self.world)
        self.num_microbatches = job.train.micro_batches(self.dp_size)  # this iteration's (the schedule's, if any)
        self.batch = job.train.global_batch_size
        self.calculator = optim.batch_calculator(job, self.dp_size, self.rank)

    def _next_batch(self) -> None:
        """The global batch and micro-batch count of the next iteration: under a batch-size schedule, megatron-core's
        calculator at the samples consumed so far (it checks the batch divides by micro batch × data parallel)."""
        if self.calculator is None:
            return
        self.calculator.update(self.consumed, consistency_check=True)
        self.num_microbatches = self.calculator.get()
        self.batch = self.calculator.get_current_global_batch_size()

    # ------------------------------------------------------------------ steps
    def _fwd_bwd(self, iterator, forward_only: bool, num_microbatches: int | None = None) -> list[dict]:
        from megatron.core.pipeline_parallel import get_forward_backward_func

        t, m = self.job.train, self.job.model
        many = len(self.model) > 1
        return get_forward_backward_func()(
            forward_step_func=self.stragglers.wrap(partial(forward_step, per_token=t.per_token_loss)),
            data_iterator=[iterator] * len(self.model) if many else iterator,
            model=self.model if many else self.model[0],
            num_microbatches=self.num_microbatches if num_microbatches is None else num_microbatches,
            seq_length=m.seq_length,
            micro_batch_size=t.micro_batch_size,
            decoder_seq_length=m.seq_length,
            forward_only=forward_only,
        )

    def train_step(self) -> tuple[list[dict], bool, float | None]:
        for chunk in self.model:
            chunk.zero_grad_buffer()
        self.optimizer.zero_grad()
        losses = self._fwd_bwd(self.train_iter, forward_only=False)
        ok, grad_norm, _zeros = self.optimizer.step()
        if ok:
            self.scheduler.step(increment=self.batch)
        return losses, not ok, grad_norm

    def _moe_aux_loss(self) -> tuple[float, float]:
        """(this rank's mean router load-balancing loss per MoE layer and micro-batch, 1) or (0, 0)."""
        if not self.job.model.moe.num_experts:
            return 0.0, 0.0
        from megatron.core.transformer.moe.moe_logging import get_moe_metrics_tracker

        tracker = get_moe_metrics_tracker()
        entry = tracker.metrics.get("load_balancing_loss")
        if entry is None:
            return 0.0, 0.0
        value = float(entry.values.float().sum()) / (self.job.model.num_layers * self.num_microbatches)
        tracker.clear()
        return value, 1.0

    def evaluate(self) -> float:
        import torch
        import torch.distributed as dist

        from .optim import params_synced

        self.heartbeat.beat("eval", self.iteration)
        self.gc.collect()
        with params_synced(self.model, self.optimizer, self.plan):
            for chunk in self.model:
                chunk.eval()
            total = torch.zeros(2, dtype=torch.float64, device=torch.cuda.current_device())
            with torch.no_grad():
                # evaluation batches are the (final) global batch, whatever the schedule trains now
                eval_microbatches = self.job.train.micro_batches(self.dp_size)
                for _ in range(self.job.train.eval_iters):
                    total += _loss_sum(self._fwd_bwd(self.valid_iter, forward_only=True,
                                                     num_microbatches=eval_microbatches))
            for chunk in self.model:
                chunk.train()
        dist.all_reduce(total)
        s, n = total.tolist()
        self.gc.collect()
        return s / max(n, 1.0)

    def _tokenizer_record(self, resumed_from: str | None) -> dict | None:
        """The tokenizer this run's checkpoints record: its own; else (NullTokenizer: pre-tokenized or mock data)
        the one the weights came with — the resumed checkpoint's, or ``train.init_from``'s."""
        from .interop import hf_tokenizer

        if self.tok.record is not None:
            return self.tok.record
        source = resumed_from or self.job.train.init_from
        rec = hf_tokenizer.inherited(source) if source else None
        if rec is not None:
            _log(self.rank, f"[checkpoint] data.tokenizer is NullTokenizer: checkpoints keep the tokenizer of "
                            f"{source}, {hf_tokenizer.describe(rec)}")
        return rec

    def _side_files(self, common: dict) -> dict[str, str]:
        """Files beside each checkpoint: the pretrain_gpt.py arguments that continue this run in Megatron-LM."""
        from .interop import megatron_lm

        if self.rank != 0:
            return {}
        argv = megatron_lm.pretrain_gpt_argv(common["args"], self.job, str(self.ckpt.root.resolve()))
        return {megatron_lm.ARGS_FILE: megatron_lm.args_file_text(argv, self.iteration, self.job,
                                                                    self.plan.attention)}

    def save(self, blocking: bool = True) -> None:
        """Checkpoint the current iteration. ``blocking=False`` (periodic saves) writes in the background
        when ``train.checkpoint.async_save`` is set; saves before exiting always block."""
        from .checkpoint import common_state
        from .metrics import flops_per_iteration

        if self.last_saved == self.iteration:
            if blocking:
                self.ckpt.wait()
            return
        from .optim import params_synced

        self.heartbeat.beat("save", self.iteration)
        t0 = time.perf_counter()
        common = common_state(self.job, iteration=self.iteration, consumed_samples=self.consumed,
                              data_parallel_size=self.dp_size, vocab_size=self.tok.vocab_size,
                              padded_vocab_size=self.padded_vocab,
                              flops_so_far=flops_per_iteration(self.job, self.padded_vocab, batch=self.consumed),
                              tokenizer=self.tokenizer_record)
        from .lr_resume import record_in_args

        record_in_args(common["args"], self.scheduler, self.job.train.global_batch_size)  # samples with a schedule
        with params_synced(self.model, self.optimizer, self.plan):
            path = self.ckpt.save(self.iteration, self.model, self.optimizer, self.scheduler, common,
                                  self.job.parallel.distributed_optimizer, blocking=blocking,
                                  side_files=self._side_files(common))
        self.last_saved = self.iteration
        verb = "scheduled async save of" if self.ckpt.in_flight == self.iteration else "saved"
        _log(self.rank, f"[checkpoint] {verb} iteration {self.iteration} to {path} "
                        f"in {time.perf_counter() - t0:.2f}s")

    # ------------------------------------------------------------------ loop
    def run(self) -> tuple[int, str]:
        """Train to ``train.iterations`` or until stopped; returns (exit code, reason)."""
        import torch
        import torch.distributed as dist

        t = self.job.train
        ckpt = t.checkpoint
        if self.iteration >= t.iterations:
            _log(self.rank, f"[mtk] checkpoint is at iteration {self.iteration} ≥ train.iterations "
                            f"({t.iterations}): nothing to do")
            return exitcodes.OK, "already complete"
        if self.calculator is None:
            per_step = f"{self.num_microbatches} micro-batches per step"
        else:
            per_step = BatchSchedule.of(self.job).describe(t.iterations, self.job.model.seq_length)
        _log(self.rank, f"[mtk] training iterations {self.iteration + 1}..{t.iterations}, {per_step}")
        for chunk in self.model:
            chunk.train()
        self.gc.start()
        while self.iteration < t.iterations:
            nxt = self.iteration + 1
            self.heartbeat.beat("step", nxt)
            self.profiler.before(nxt)
            self.nsys.before(nxt)
            self._next_batch()
            t0 = time.perf_counter()
            losses, skipped, grad_norm = self.train_step()
            device_synchronize()
            step_s = time.perf_counter() - t0
            self.profiler.after(nxt)
            self.nsys.after(nxt)
            self.iteration = nxt
            self.consumed += self.batch
            self.gc.after_step(nxt)
            log_now = nxt % t.log_interval == 0 or nxt == t.iterations
            aux, aux_n = self._moe_aux_loss()
            flags = self.control.local_flags(check_triggers=log_now)
            red: Any = torch.cat([_loss_sum(losses),
                             torch.tensor([aux, aux_n, *flags, *self.stragglers.payload(nxt, step_s)],
                                          dtype=torch.float64, device=torch.cuda.current_device())])
            if self.world > 1:
                dist.all_reduce(red)
            red = red.tolist()  # the iteration's one device-to-host read
            loss = red[0] / red[1] if red[1] > 0 else float("nan")
            decision = self.control.decision(red[4:])
            self.metrics.stragglers(self.stragglers.receive(nxt, red[4 + len(flags):]))
            self.metrics.step(loss, step_s, skipped, red[2] / red[3] if red[3] > 0 else None, batch=self.batch)
            if log_now:
                from .metrics import logged_lrs

                lr, decoupled = logged_lrs(self.optimizer.param_groups)
                gn = None if grad_norm is None else float(grad_norm)
                self.metrics.log(nxt, self.consumed, lr, gn, self.optimizer.get_loss_scale().item(),
                                 decoupled_lr=decoupled)
            if self.valid_iter is not None and t.eval_interval and nxt % t.eval_interval == 0:
                self.metrics.log_eval(nxt, self.evaluate())
            if decision.signal:
                _log(self.rank, f"[mtk] {self.control.signalled or 'signal'} received: saving at iteration "
                                f"{nxt} and exiting for requeue")
                self.save()
                return exitcodes.REQUEUE, f"signal {self.control.signalled or 'SIGTERM/SIGUSR2'}"
            if decision.exit:
                _log(self.rank, f"[mtk] exit trigger found: saving at iteration {nxt} and stopping")
                self.save()
                self.control.consume_exit_trigger()
                return exitcodes.STOPPED, "exit trigger"
            if decision.save:
                _log(self.rank, f"[mtk] save trigger found: saving at iteration {nxt}")
                self.save()
                self.control.consume_save_trigger()
            if ckpt.save_interval and nxt % ckpt.save_interval == 0:
                self.save(blocking=False)
            self.ckpt.poll()
        if ckpt.save_on_exit:
            self.save()
        self.ckpt.wait()
        return exitcodes.OK, "completed"

    def close(self) -> None:
        self.gc.stop()
        self.heartbeat.stop()
        if hasattr(self, "profiler"):
            self.profiler.finish()
        if hasattr(self, "nsys"):
            self.nsys.finish()
        if hasattr(self, "metrics"):
            self.metrics.close()
        if hasattr(self, "train_iter"):
            from .data import close_batches

            close_batches(self.train_iter)
        self.control.uninstall()


def train(job: Job, run_dir: str | Path) -> int:
    """Run one worker to completion; always leaves ``state/last_exit.json`` (rank 0) and returns the code."""
    from .control import write_last_exit

    trainer = Trainer(job, run_dir)
    rank = int(os.environ.get("RANK", "0"))
    code, reason = exitcodes.FAILED, "failed during setup"
    try:
        trainer.setup()
        code, reason = trainer.run()
    except Refused as exc:  # every rank refuses together (see refusal.py): one line, no traceback
        code, reason = exitcodes.USAGE, str(exc)
        _log(rank, f"[mtk] error: {exc}")
    except BaseException as exc:
        reason = f"{type(exc).__name__}: {exc}"[:500]
        if rank == 0:
            write_last_exit(run_dir, exitcodes.FAILED, trainer.iteration, reason, _ckpt_iter(trainer))
        raise
    finally:
        trainer.close()
    if rank == 0:
        write_last_exit(run_dir, code, trainer.iteration, reason, _ckpt_iter(trainer))
    said = "refused (the error above)" if code == exitcodes.USAGE else reason
    _log(rank, f"[mtk] exit {code}: {said} (iteration {trainer.iteration})")
    from .distributed import shutdown

    shutdown()
    return code


def _ckpt_iter(trainer: Trainer) -> int | None:
    try:
        return trainer.ckpt.latest()
    except Exception:
        return trainer.last_saved
