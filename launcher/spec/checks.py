"""Cross-field checks that run before any cluster time is spent.

Each check is a small function ``(job, backend) -> list[Problem]`` so a failure names both fields and values,
and all problems are reported at once.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from .errors import Problem

if TYPE_CHECKING:
    from .job import Job

Check = Callable[["Job", "str | None"], list[Problem]]
CHECKS: list[Check] = []


def check(fn: Check) -> Check:
    CHECKS.append(fn)
    return fn


def data_parallel_size(job: Job) -> int:
    """DP = GPUs / (TP × PP × CP), as Megatron-Core derives it."""
    p = job.parallel
    return job.cluster.world_size // (p.tp * p.pp * p.cp)


@check
def gpus_divisible_by_model_parallel(job: Job, backend) -> list[Problem]:
    p, c = job.parallel, job.cluster
    mp = p.tp * p.pp * p.cp
    if c.world_size % mp and c.min_nodes is None:  # a spare-node range: spare_nodes_keep_the_batch checks each count
        return [Problem("cluster.procs_per_node", f"nodes × procs_per_node = {c.nodes} × {c.procs_per_node} = "
                        f"{c.world_size} GPUs is not divisible by parallel.tp × pp × cp = {p.tp} × {p.pp} × {p.cp}"
                        f" = {mp}; change the node count or the parallel sizes", c.world_size)]
    return []


@check
def heads_divisible_by_tp(job: Job, backend) -> list[Problem]:
    m, tp = job.model, job.parallel.tp
    out = []
    if m.num_attention_heads % tp:
        out.append(Problem("model.num_attention_heads", f"{m.num_attention_heads} heads must be a multiple of "
                           f"parallel.tp ({tp}); pick a tp that divides it", m.num_attention_heads))
    if m.num_query_groups is not None and m.num_attention_heads % m.num_query_groups:
        out.append(Problem("model.num_query_groups", f"must divide num_attention_heads "
                           f"({m.num_attention_heads})", m.num_query_groups))
    elif m.query_groups % tp and m.num_attention_heads % tp == 0:
        out.append(Problem("model.num_query_groups", f"{m.query_groups} query groups must be a multiple of "
                           f"parallel.tp ({tp})", m.query_groups))
    if m.hidden_size % m.num_attention_heads:
        out.append(Problem("model.hidden_size", f"must be a multiple of num_attention_heads "
                           f"({m.num_attention_heads})", m.hidden_size))
    return out


@check
def layers_divisible_by_pp(job: Job, backend) -> list[Problem]:
    m, p = job.model, job.parallel
    stages = p.pp * (p.virtual_pp or 1)
    if m.num_layers % stages:
        what = f"parallel.pp × virtual_pp ({p.pp} × {p.virtual_pp})" if p.virtual_pp else f"parallel.pp ({p.pp})"
        return [Problem("model.num_layers", f"{m.num_layers} layers must be a multiple of {what}", m.num_layers)]
    if p.virtual_pp and p.pp == 1:
        return [Problem("parallel.virtual_pp", "interleaved stages need parallel.pp > 1", p.virtual_pp)]
    return []


@check
def global_batch_divisible(job: Job, backend) -> list[Problem]:
    t = job.train
    dp = data_parallel_size(job)
    if dp and t.global_batch_size % (t.micro_batch_size * dp):
        return [Problem("train.global_batch_size", f"{t.global_batch_size} is not divisible by "
                        f"train.micro_batch_size × data-parallel size = {t.micro_batch_size} × {dp} = "
                        f"{t.micro_batch_size * dp}; use a multiple of it", t.global_batch_size)]
    return []


@check
def spare_nodes_keep_the_batch(job: Job, backend) -> list[Problem]:
    """With ``nodes: MIN:MAX`` every node count in the range must fit the parallel layout and the global batch
    (DP and gradient accumulation are derived from the healthy nodes, the global batch is kept)."""
    c, p, t = job.cluster, job.parallel, job.train
    if c.min_nodes is None:
        return []
    shown = f"{c.min_nodes}:{c.nodes}"
    if c.min_nodes > c.nodes:
        return [Problem("cluster.nodes", f"the spare-node range MIN:MAX has MAX below MIN; write {c.nodes}:"
                        f"{c.min_nodes}", shown)]
    if backend in ("eks", "local"):
        why = ("on EKS a smaller world would crash-loop on the world-size check (the PyTorchJob keeps exactly "
               "cluster.nodes pods; a lost pod is replaced)" if backend == "eks" else
               "the local backend runs on this machine only")
        return [Problem("cluster.nodes", f"a MIN:MAX range (spare nodes) is for Slurm only: {why}; set a single "
                        f"count, e.g. {c.nodes}", shown)]
    mp, mb = p.tp * p.pp * p.cp, t.micro_batch_size
    bad = []
    for n in c.node_counts:
        world = n * c.procs_per_node
        if world % mp:
            bad.append(f"{n} nodes: {world} processes not divisible by tp × pp × cp = {mp}")
        elif t.global_batch_size % (mb * (world // mp)):
            bad.append(f"{n} nodes: train.global_batch_size {t.global_batch_size} not divisible by micro_batch_size "
                       f"× DP = {mb} × {world // mp}")
    if bad:
        return [Problem("cluster.nodes", "every node count in the spare-node range must keep the global batch ("
                        + "; ".join(bad) + "); narrow the range or pick a global batch that all of them divide",
                        shown)]
    return []


@check
def seq_fits_positions(job: Job, backend) -> list[Problem]:
    m = job.model
    out = []
    if m.max_position_embeddings is not None and m.seq_length > m.max_position_embeddings:
        out.append(Problem("model.seq_length", f"exceeds model.max_position_embeddings "
                           f"({m.max_position_embeddings}); lower it or raise max_position_embeddings",
                           m.seq_length))
    cp = job.parallel.cp
    if cp > 1 and m.seq_length % (2 * cp):
        out.append(Problem("model.seq_length", f"must be a multiple of 2 × parallel.cp ({2 * cp}) for context "
                           "parallelism", m.seq_length))
    return out


@check
def sequence_parallel_needs_tp(job: Job, backend) -> list[Problem]:
    p = job.parallel
    if p.sequence_parallel and p.tp == 1:
        return [Problem("parallel.sequence_parallel", "needs parallel.tp > 1 (it shards activations over "
                        "tensor-parallel ranks); set tp ≥ 2 or turn it off", True)]
    return []


@check
def moe_sizes(job: Job, backend) -> list[Problem]:
    moe, p = job.model.moe, job.parallel
    out = []
    if moe.num_experts == 0:
        if p.ep > 1:
            out.append(Problem("parallel.ep", "expert parallelism needs model.moe.num_experts > 0", p.ep))
        return out
    if moe.num_experts % p.ep:
        out.append(Problem("model.moe.num_experts", f"{moe.num_experts} experts must be divisible by "
                           f"parallel.ep ({p.ep})", moe.num_experts))
    if moe.router_topk > moe.num_experts:
        out.append(Problem("model.moe.router_topk", f"cannot exceed model.moe.num_experts ({moe.num_experts})",
                           moe.router_topk))
    world = job.cluster.world_size
    if world % (p.tp * p.pp * p.ep):
        out.append(Problem("parallel.ep", f"parallel.tp × pp × ep = {p.tp} × {p.pp} × {p.ep} must divide the "
                           f"{world} GPUs (experts are sharded across data-parallel ranks)", p.ep))
    if p.ep > 1 and p.cp > 1:
        out.append(Problem("parallel.ep", "expert parallel together with context parallel is not supported "
                           "by mtk yet; use one of them", p.ep))
    if job.model.add_bias_linear and p.ep == 1 and p.tp == 1:
        # megatron-core 0.19's expert MLP adds its bias in place onto the output of the (identity) TP reduce, which
        # autograd forbids: the first training step dies ("... is a view and is being modified inplace").
        out.append(Problem("model.add_bias_linear", "MoE experts with biases crash at the first training step (the "
                           "local expert MLP adds its bias in place) when parallel.ep = 1 and parallel.tp = 1: "
                           "set model.add_bias_linear: false, or parallel.ep > 1", True))
    return out


@check
def precision_fits_device(job: Job, backend) -> list[Problem]:
    t, c = job.train, job.cluster
    if c.device == "cpu" and t.precision in ("fp16", "fp8"):
        return [Problem("train.precision", f"{t.precision} needs a GPU; use bf16 or fp32 with "
                        "cluster.device: cpu", t.precision)]
    return []


@check
def schedule_is_sane(job: Job, backend) -> list[Problem]:
    t = job.train
    out = []
    if t.min_lr > t.lr:
        out.append(Problem("train.min_lr", f"is above train.lr ({t.lr})", t.min_lr))
    if t.lr_warmup_iters and t.lr_warmup_iters >= (t.lr_decay_iters or t.iterations):
        # Megatron-Core's scheduler asserts warmup < decay on every rank at start-up.
        out.append(Problem("train.lr_warmup_iters", f"is as long as or longer than the decay horizon "
                           f"({t.lr_decay_iters or t.iterations} iterations); Megatron-Core needs warmup < decay: "
                           "lower it or train longer",
                           t.lr_warmup_iters))
    horizon = max(t.iterations, t.lr_decay_iters or 0)
    tokens = horizon * t.global_batch_size * job.model.seq_length
    if tokens > 2**63 - 1:  # Megatron counts samples and tokens in int64 (dataset indices, the LR schedule)
        field = "train.iterations" if horizon == t.iterations else "train.lr_decay_iters"
        out.append(Problem(field, f"× train.global_batch_size ({t.global_batch_size}) × model.seq_length "
                           f"({job.model.seq_length}) = {tokens:.3g} tokens, past the 64-bit counters Megatron's "
                           "datasets and schedule use; lower it", horizon))
    return out


@check
def corpus_beside_a_mixture_has_a_weight(job: Job, backend) -> list[Problem]:
    """A corpus mixed with weighted blend/folder entries must say its share; 1.0 beside 0.3/0.7 is a guess."""
    d = job.data
    if d.corpus is None or d.corpus.weight is not None or not (d.blend or d.folders):
        return []
    listed = {d.resolve(b.prefix) for b in d.blend}
    if not d.folders and all(p in listed for p in d.corpus_prefixes()):
        return []  # the blend names the corpus' own prefixes with their weights: nothing is guessed
    given = ", ".join(f"{b.prefix}={b.weight:g}" for b in d.blend) or ", ".join(
        f"{f.path}={f.weight:g}" for f in d.folders)
    return [Problem("data.corpus.weight", f"required when data.blend/data.folders are given too ({given}): set "
                    "the corpus' share in the same units, e.g. data.corpus.weight: 0.5")]


@check
def profiler_is_wired_for_backend(job: Job, backend) -> list[Problem]:
    """Nsight Systems wraps the node agent in the Slurm script only; elsewhere it would be silently ignored."""
    if job.debug.nsys.enabled and backend in ("local", "eks"):
        return [Problem("debug.nsys.enabled", f"Nsight Systems capture is wired into the slurm backend only, not "
                        f"{backend}; use debug.torch_profiler (every backend) or --backend slurm", True)]
    return []


@check
def tokenizer_has_files(job: Job, backend) -> list[Problem]:
    d = job.data
    tok = d.tokenizer
    out = []
    needs = {"GPT2BPETokenizer": ("vocab_file", "merge_file"), "HuggingFaceTokenizer": ("model",),
             "GPTSentencePieceTokenizer": ("model",)}.get(tok.type, ())
    for field in needs:
        if getattr(tok, field) is None:
            out.append(Problem(f"data.tokenizer.{field}", f"required for tokenizer type {tok.type}"))
    if d.corpus is not None and tok.type == "NullTokenizer":
        out.append(Problem("data.tokenizer.type", "preprocessing a corpus needs a real tokenizer: "
                           "GPT2BPETokenizer, HuggingFaceTokenizer or GPTSentencePieceTokenizer", tok.type))
    return out


@check
def backend_required_fields(job: Job, backend) -> list[Problem]:
    c, out = job.cluster, []
    if backend == "local" and c.nodes != 1:
        out.append(Problem("cluster.nodes", "the local backend runs on this machine only; set nodes: 1 "
                           "(or use --backend slurm/eks)", c.nodes))
    if backend == "slurm":
        s = c.slurm
        if s.runtime == "pyxis" and not (s.container_image or job.image.sqsh):
            out.append(Problem("cluster.slurm.container_image", "the pyxis runtime needs an image: set "
                               "image.sqsh (from `mtk build-image --sqsh`) or cluster.slurm.container_image"))
        if s.runtime == "bare" and s.venv and s.conda_env:
            out.append(Problem("cluster.slurm.conda_env", "set either cluster.slurm.venv or conda_env, not both"))
    if backend == "eks":
        if not job.image.registry:
            out.append(Problem("image.registry", "EKS pods pull the image from a registry: set image.registry "
                               "(e.g. <account>.dkr.ecr.<region>.amazonaws.com) and run `mtk build-image --push`"))
        e = c.eks
        if e.fsx_claim:
            for field, path in (("cluster.runs_dir", c.runs_dir), ("data.dir", job.data.dir)):
                if not path.startswith(e.fsx_mount.rstrip("/") + "/") and path != e.fsx_mount:
                    out.append(Problem(field, f"must be under cluster.eks.fsx_mount ({e.fsx_mount}) so every "
                                       "pod sees it", path))
        if not e.fsx_claim and (job.data.fetch or job.data.corpus):
            # Each data Job would write into its own pod's disk, and the steps after it wait for files that never
            # appear on a volume they share.
            out.append(Problem("cluster.eks.fsx_claim", "the getdata/preprocess steps hand their files to training "
                               "through shared storage: set cluster.eks.fsx_claim to the shared filesystem's "
                               "PersistentVolumeClaim, or prepare the data beforehand and drop data.fetch/"
                               "data.corpus"))
        if e.min_nodes is not None and e.min_nodes != c.nodes:
            # A smaller world would start (torchrun --nnodes=min:max) and crash-loop in the engine's world-size
            # check: the parallel layout, batch split and exact resume are all fixed by nodes × procs_per_node.
            out.append(Problem("cluster.eks.min_nodes", f"elastic ranges are not supported: training needs exactly "
                               f"cluster.nodes ({c.nodes}) pods, and fewer would crash-loop on the world-size check; "
                               f"remove min_nodes or set it to {c.nodes} (a lost pod is replaced and the run "
                               "resumes from the last checkpoint)", e.min_nodes))
    return out


@check
def env_not_owned_by_the_launcher(job: Job, backend) -> list[Problem]:
    """RANK, MASTER_ADDR, SLURM_*, ... belong to torchrun, Slurm or mtk (see :mod:`.env_names`)."""
    from .env_names import reserved_env_problems

    return reserved_env_problems(list(job.cluster.env), job.cluster.secret_names)


@check
def credentials_by_reference(job: Job, backend) -> list[Problem]:
    """A credential in ``cluster.env`` would be written in clear into job.json, scripts and manifests."""
    from mtk.launcher.secrets import looks_secret

    c, out = job.cluster, []
    for name in c.env:
        if looks_secret(name):
            out.append(Problem(f"cluster.env.{name}", "looks like a credential: its value would be written in "
                               "clear into job.json, the run scripts and the manifests. Remove it from cluster.env, "
                               f"list it under cluster.secrets (cluster.secrets: [{name}]) and export {name} in the "
                               "shell that launches (EKS: store it in a Kubernetes Secret)"))
    seen: set[str] = set()
    for i, ref in enumerate(c.secrets):
        if ref.name in seen:
            out.append(Problem(f"cluster.secrets.{i}.name", "listed twice; keep one entry", ref.name))
        if ref.name in c.env:
            out.append(Problem(f"cluster.secrets.{i}.name", f"also set in cluster.env.{ref.name}; a secret comes "
                               "only from the environment (or Secret) it references", ref.name))
        seen.add(ref.name)
    return out


@check
def fetch_items_are_safe(job: Job, backend) -> list[Problem]:
    """Fetch destinations stay inside data.dir; auth names a declared secret and never rides plain HTTP."""
    import posixpath

    out, secrets = [], set(job.cluster.secret_names)
    for i, item in enumerate(job.data.fetch):
        if item.path is not None:
            norm = posixpath.normpath(item.path)
            if posixpath.isabs(item.path) or norm == ".." or norm.startswith("../") or norm in (".", ""):
                out.append(Problem(f"data.fetch.{i}.path", "must be a file path relative to data.dir that stays "
                                   "inside it (no leading '/', no '..')", item.path))
        if _url_carries_credentials(item.url):
            out.append(Problem(f"data.fetch.{i}.url", "carries a credential (user:password@ or a token/signature "
                               "parameter), which would be written into job.json and the manifests; put the token "
                               "in a secret and reference it: auth: HF_TOKEN (listed in cluster.secrets)"))
        if item.auth is not None:
            if item.auth not in secrets:
                out.append(Problem(f"data.fetch.{i}.auth", f"names no secret: add it to cluster.secrets "
                                   f"(cluster.secrets: [{item.auth}]) so the value reaches the getdata step",
                                   item.auth))
            if not (item.url.startswith("https://") or _loopback(item.url)):
                out.append(Problem(f"data.fetch.{i}.auth", "a token is only sent over https:// (or to this "
                                   "machine's loopback address); fix the URL", item.url))
    return out


@check
def fetch_is_pinned(job: Job, backend) -> list[Problem]:
    """A fetch from a moving revision (a branch, ``latest``) without sha256 changes every later run's data
    silently when upstream pushes; it must be pinned, or say that it trusts its first download."""
    from .fetch_pins import moving_ref

    out = []
    for i, item in enumerate(job.data.fetch):
        ref = moving_ref(item.url)
        if ref and not item.sha256 and not item.trust_first_fetch:
            out.append(Problem(f"data.fetch.{i}.url", f"names the moving revision {ref!r} and has no sha256: what "
                               "it downloads changes whenever upstream pushes. Put a commit id in the URL and set "
                               "sha256 (of the final, decompressed file), or set trust_first_fetch: true to have "
                               "getdata record the first download's SHA-256 and refuse a later one that differs",
                               item.url))
    return out


def _url_carries_credentials(url: str) -> bool:
    import urllib.parse

    parsed = urllib.parse.urlsplit(url)
    if parsed.password or (parsed.username and parsed.scheme in ("http", "https")):
        return True
    from mtk.launcher.secrets import looks_secret

    names = [k for k, _ in urllib.parse.parse_qsl(parsed.query, keep_blank_values=True)]
    return any(looks_secret(k.replace("-", "_")) or "signature" in k.lower() for k in names)


def _loopback(url: str) -> bool:
    import ipaddress
    import urllib.parse

    host = urllib.parse.urlparse(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_IDX_MAGIC = b"MMIDIDX\x00\x00"
_ITEM_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 8, 7: 4, 8: 2}  # Megatron's dtype codes -> bytes per token


def indexed_pair_problem(prefix: str) -> str | None:
    """What is wrong with a Megatron ``.idx``/``.bin`` pair, read from the headers and the last entry only:
    a garbage index, an index of the wrong size, or a ``.bin`` shorter than the index says."""
    import struct

    idx, binf = prefix + ".idx", prefix + ".bin"
    try:
        with open(idx, "rb") as fh:
            head = fh.read(34)
            if len(head) < 34 or head[:9] != _IDX_MAGIC:
                return f"{idx} is not a Megatron index file (bad header)"
            version, code, n_seq, n_doc = struct.unpack("<QBQQ", head[9:34])
            if version != 1 or code not in _ITEM_SIZES:
                return f"{idx}: unknown index version {version} or dtype code {code}"
            expected = 34 + 12 * n_seq + 8 * n_doc
            actual = os.path.getsize(idx)
            if actual != expected:
                return f"{idx} is {actual} bytes but its header describes {expected} (truncated or damaged)"
            if n_seq == 0:
                return None
            fh.seek(34 + 4 * (n_seq - 1))
            (last_size,) = struct.unpack("<i", fh.read(4))
            fh.seek(34 + 4 * n_seq + 8 * (n_seq - 1))
            (last_ptr,) = struct.unpack("<q", fh.read(8))
    except OSError as exc:
        return f"{idx}: {exc.strerror}"
    need = last_ptr + last_size * _ITEM_SIZES[code]
    have = os.path.getsize(binf)
    if last_size < 0 or last_ptr < 0 or have < need:
        return f"{binf} is {have} bytes but {idx} needs {need} (truncated, or not the index's data file)"
    return None


def _file_problems(job: Job) -> list[Problem]:
    """Inputs that must exist when the run starts, unless an earlier step of this run produces them."""
    d = job.data
    fetched = {d.resolve(f.path or f.url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".xz")
                         .removesuffix(".gz").removesuffix(".zst")) for f in d.fetch}
    produced = set(d.corpus_prefixes())
    out = []
    for i, item in enumerate(d.blend):
        prefix = d.resolve(item.prefix)
        if prefix in produced:
            continue
        missing = False
        for ext in (".bin", ".idx"):
            if not os.path.exists(prefix + ext):
                missing = True
                out.append(Problem(f"data.blend.{i}.prefix", f"{prefix}{ext} does not exist; run preprocess "
                                   "first or fix the prefix (without .bin/.idx)", item.prefix))
        damage = None if missing else indexed_pair_problem(prefix)
        if damage:
            out.append(Problem(f"data.blend.{i}.prefix", f"{damage}; run preprocess again for this prefix",
                               item.prefix))
    for i, folder in enumerate(d.folders):
        if not os.path.isdir(d.resolve(folder.path)):
            out.append(Problem(f"data.folders.{i}.path", "folder does not exist", folder.path))
    for field in ("vocab_file", "merge_file", "model"):
        value = getattr(d.tokenizer, field)
        if value and d.resolve(value) not in fetched and not os.path.exists(d.resolve(value)):
            out.append(Problem(f"data.tokenizer.{field}", f"{d.resolve(value)} does not exist and no "
                               "data.fetch item downloads it", value))
    if d.corpus is not None:
        src = d.resolve(d.corpus.input)
        if src not in fetched and not os.path.exists(src):
            out.append(Problem("data.corpus.input", f"{src} does not exist and no data.fetch item downloads it",
                               d.corpus.input))
    return out


def run_checks(job: Job, backend: str | None = None, check_files: bool = False) -> list[Problem]:
    """Every cross-field check; file checks only where the launching machine sees the data."""
    problems = [p for fn in CHECKS for p in fn(job, backend)]
    if check_files:
        problems += _file_problems(job)
    return problems
