"""``data``: mock data, a blend of preprocessed prefixes, or a corpus mtk fetches and preprocesses.

The steps a run needs follow from this section: ``fetch`` → getdata, ``corpus`` → preprocess, then train.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from .base import Section

TokenizerType = Literal[
    "GPT2BPETokenizer",
    "HuggingFaceTokenizer",
    "GPTSentencePieceTokenizer",
    "NullTokenizer",
]


class FetchItem(Section):
    """One file getdata downloads into ``data.dir`` (resumable, verified when sha256 is given)."""

    url: str = Field(..., description="http(s)://, s3://, file:// or a local path.")
    path: str | None = Field(None, description="Destination relative to data.dir (default: the URL's file name).")
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$", description="Expected SHA-256 of the final file.")
    decompress: bool = Field(True, description="Decompress .xz/.gz/.zst while downloading.")
    trust_first_fetch: bool = Field(
        False, description="Accept a URL that names a moving revision (…/resolve/main/…, latest) without sha256: "
        "getdata records the SHA-256 of the first download beside the file and refuses a later download that "
        "differs. Prefer a commit in the URL and sha256.")
    auth: str | None = Field(
        None, description="Secret reference (a cluster.secrets name, e.g. HF_TOKEN) sent as a bearer token to this "
        "URL's host only, never across a redirect to another host.")


class TokenizerSpec(Section):
    """Tokenizer files, relative to ``data.dir`` unless absolute."""

    type: TokenizerType = "NullTokenizer"
    vocab_file: str | None = Field(None, description="GPT2BPETokenizer: vocab.json.")
    merge_file: str | None = Field(None, description="GPT2BPETokenizer: merges.txt.")
    model: str | None = Field(None, description="HuggingFaceTokenizer: tokenizer.json; SentencePiece: tokenizer.model.")
    legacy_eod_as_text: bool = Field(
        False, description="Treat a literal <|endoftext|> in text as plain text (older Megatron behaviour)."
    )


class CorpusSpec(Section):
    """A JSONL/Parquet corpus to tokenize into Megatron .bin/.idx (the preprocess step)."""

    input: str = Field(..., description="JSONL (.gz/.xz/.zst ok) or Parquet file, a directory of them, or an "
                       "s3://bucket/prefix; relative to data.dir.")
    output_prefix: str = Field(..., description="Output prefix; files are {prefix}_{key}_document.bin/.idx.")
    json_keys: list[str] = Field(default_factory=lambda: ["text"], min_length=1)
    append_eod: bool = True
    workers: int | None = Field(None, ge=1, description="Processes per task (default: the CPUs the task may use; "
                                "Slurm then allocates the whole node).")
    skip_bad_lines: bool = Field(False, description="Same as on_error: skip-and-count.")
    on_error: Literal["fail", "skip-and-count"] = Field(
        "fail", description="A malformed line/row: stop naming file, line/row and shard, or skip it and count it.")
    allow_empty: bool = Field(False, description="Accept an input without documents (otherwise an error).")
    shards: int = Field(1, ge=1, le=10000, description="Tasks the preprocess step is split into (a Slurm job array, "
                        "an EKS Indexed Job); the last task to finish merges into the one output prefix.")
    max_parallel: int | None = Field(None, ge=1, description="At most this many tasks at once (Slurm --array "
                                     "throttle, Indexed Job parallelism; default: all).")
    shard_mb: float | None = Field(None, gt=0, description="Unit of work and of resume (default: input size / 64, "
                                   "within 1-64 MiB); tasks own contiguous runs of these.")
    weight: float | None = Field(None, gt=0, description="The corpus' weight when data.blend or data.folders are "
                                                          "given too (required then; alone it is the whole data).")


class BlendItem(Section):
    """A preprocessed prefix (``.bin``/``.idx`` without the extension) and its weight."""

    prefix: str
    weight: float = Field(1.0, gt=0)


class FolderItem(Section):
    """Every prefix found under a folder, sharing one weight (a data mixture source)."""

    path: str
    weight: float = Field(1.0, gt=0)


class DataSpec(Section):
    """Training data. With no blend, folders or corpus, training uses mock data."""

    dir: str = Field("data", description="Shared data directory (FSx on AWS); relative paths are resolved against it.")
    fetch: list[FetchItem] = Field(default_factory=list, description="Files the getdata step downloads.")
    corpus: CorpusSpec | None = None
    blend: list[BlendItem] = Field(default_factory=list)
    folders: list[FolderItem] = Field(default_factory=list)
    tokenizer: TokenizerSpec = Field(default_factory=TokenizerSpec)
    split: str = Field("949,50,1", description="train,valid,test weights.")
    cache_dir: str | None = Field(
        None, description="Dataset index cache (default: <data.dir>/index-cache); must be shared."
    )
    num_workers: int = Field(2, ge=0, description="DataLoader workers per rank.")

    @field_validator("split")
    @classmethod
    def _split_is_three_numbers(cls, v: str) -> str:
        parts = v.split(",")
        if len(parts) != 3 or not all(p.strip().replace(".", "", 1).isdigit() for p in parts):
            raise ValueError("split must be three comma-separated numbers, e.g. '949,50,1'")
        return v

    @property
    def mock(self) -> bool:
        return not (self.blend or self.folders or self.corpus)

    def resolve(self, path: str) -> str:
        """A data path as the training nodes see it: absolute paths as given, others under ``dir``."""
        if path.startswith("/") or "://" in path:
            return path
        return f"{self.dir.rstrip('/')}/{path}"

    def corpus_prefixes(self) -> list[str]:
        """The prefixes preprocess writes — exactly what training then reads (the AWS sample got this wrong)."""
        if self.corpus is None:
            return []
        base = self.resolve(self.corpus.output_prefix)
        return [f"{base}_{key}_document" for key in self.corpus.json_keys]
