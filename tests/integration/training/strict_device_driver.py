"""One torchrun rank that replays the engine's pre-fix device bugs under the CPU compat layer's strict mode.

    torchrun --standalone --nproc-per-node 2 strict_device_driver.py JOB.json OUT_DIR

Each scenario runs the code the way the engine did before it was made GPU-true (or the way it does now,
for ``fixed``) and records the StrictDeviceError message, if any, in ``OUT_DIR/rank<N>.json``. Lines the
test expects in a message carry a ``# SITE:<name>`` marker.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(job_path: str, out_dir: str) -> None:
    from mtk.training import compat

    compat.install()
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from mtk.training import data, device_plan, distributed, loop, model
    from mtk.training.strict_device import TRACKER, StrictDeviceError

    from mtk.spec import load_job_json

    job = load_job_json(job_path)
    distributed.init(job, cpu=True)
    plan = device_plan.plan(job, gpu=False, te=False)
    config = model.transformer_config(job, plan)
    info = data.tokenizer_info(job)
    chunk = model.build_model(job, config, info.vocab_size, plan)[0]
    train_ds, _ = data.build_datasets(job, info)
    t = job.train
    batches = data.batches(train_ds, data.ResumableSampler(len(train_ds), 0, t.micro_batch_size,
                                                           ps.get_data_parallel_rank(),
                                                           ps.get_data_parallel_world_size()), 0)
    results: dict[str, str | None] = {}

    def scenario(name, fn):
        try:
            results[name] = f"no error: {fn()}"
        except StrictDeviceError as exc:
            results[name] = f"StrictDeviceError: {exc}"

    def batch_not_moved():  # bug 1: the old forward_step handed the loader's host batch to the model
        b = next(batches)
        return chunk(b["tokens"], b["position_ids"], None, labels=b["labels"])  # SITE:batch

    def labels_not_moved():  # half a fix: inputs moved, labels (a keyword argument) left on the host
        b = next(batches)
        moved = data.to_device(b)
        return chunk(moved["tokens"], moved["position_ids"], None, labels=b["labels"])  # SITE:labels

    def model_not_moved():  # bug 1: the old build_model never .cuda()'d the chunks
        unmoved = GPTModel(config=config, transformer_layer_spec=model.layer_spec(job, False, config),
                           vocab_size=model.model_vocab_size(job, info.vocab_size),
                           max_sequence_length=job.model.max_positions, pre_process=True, post_process=True)
        b = data.to_device(next(batches))
        return unmoved(b["tokens"], b["position_ids"], None, labels=b["labels"])  # SITE:model

    def loss_on_host():  # bug 2: the old per-step reduction built its tensor on the host
        red = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
        dist.all_reduce(red)  # SITE:red
        return red.tolist()

    def eval_total_on_host():  # bug 2: the old evaluate() accumulated on the host, then all-reduced
        total = torch.zeros(2, dtype=torch.float64)
        total += torch.tensor([3.0, 1.0], dtype=torch.float64)
        dist.all_reduce(total)  # SITE:eval
        return total.tolist()

    def fixed():  # today's engine: forward_step moves the batch, the reduction lives on the device
        output, loss_fn = loop.forward_step(batches, chunk)
        loss, _ = loss_fn(output)
        red = loop._loss_sum([{"lm loss": loss.detach()}])
        dist.all_reduce(red)
        host = torch.zeros(1)
        dist.all_reduce(host, group=ps.get_data_parallel_group_gloo())  # host tensors are fine on gloo groups
        return red.tolist()

    for name, fn in (("batch", batch_not_moved), ("labels", labels_not_moved), ("model", model_not_moved),
                     ("red", loss_on_host), ("eval", eval_total_on_host), ("fixed", fixed)):
        scenario(name, fn)

    # context parallelism: the same two ranks as one CP=2 group; each keeps its load-balanced share
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(context_parallel_size=2)
    seq = job.model.seq_length
    full = {"tokens": torch.arange(seq).view(1, seq), "labels": torch.arange(seq).view(1, seq) + 1,
            "loss_mask": torch.ones(1, seq), "position_ids": torch.arange(seq).view(1, seq)}
    mine = data.for_context_parallel_rank(data.to_device(full), ps.get_context_parallel_world_size())
    results["cp"] = json.dumps({k: v.view(-1).tolist() for k, v in mine.items()})
    results["cp_on_device"] = str(all(v in TRACKER.device for v in mine.values()))
    Path(out_dir, f"rank{dist.get_rank()}.json").write_text(json.dumps(results))
    distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
