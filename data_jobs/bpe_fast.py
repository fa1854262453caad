"""A faster engine for GPT-2 byte-level BPE (tiktoken), used only where it gives the reference's ids.

Why: tokenization is ~all of preprocessing, and tiktoken's BPE needs ~5x fewer CPU-seconds than the Hugging
Face one that defines the reference ids (same pipeline, 100 MB of real text, benchmarks/preprocess.py).
Why it can match: both split text with the same GPT-2 regex and then repeatedly merge the best-ranked
adjacent pair. Hugging Face ranks a pair by its line in ``merges.txt``; tiktoken ranks it by the id of the
concatenated token. With merge-result ids increasing in merge order (true for GPT-2 and for anything
``tokenizers`` trains) and unique merge results, the two agree on every pair that is a merge. They can
still differ where two adjacent parts concatenate to a token through another split than its merge; no
cheap static test rules that out for every input, hence the checks below.

It is never trusted blindly:

1. **Static checks** on the files (all 256 byte symbols present, unique ids, unique merge results, ids
   increasing with merge rank); any failure -> the Hugging Face engine.
2. **Self-test** before use against Hugging Face: every vocabulary token on its own, an edge-case text set,
   and a sweep of every code point of the assigned Unicode planes in letter/digit/space contexts (this is
   where two regex engines' Unicode tables could disagree). A mismatch -> the Hugging Face engine. The
   verdict is cached per (files, options, library versions) in mtk's cache (:func:`mtk.files.cache_root`).
3. **Shadow check** at run time: every ``check_every``-th document (128th by default) is also encoded by
   Hugging Face; a difference raises :class:`FastPathMismatch`, and preprocess then redoes the whole corpus with
   Hugging Face. Hugging Face's BPE costs ~5x tiktoken's per document, so the rate sets the check's price: 1 in
   128 is ~4 % of the encoding time (1 in 64 was 7 %, which alone kept preprocess under 90 % of the tokenizer's
   own speed), and a difference that touches 1,000 documents of a corpus still goes unseen with odds < 0.1 %.

What is not proven: equality on inputs never seen by the checks. The checks above make that a loud failure
rather than silent corruption; ``engine: hf`` turns the fast path off.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mtk.files import atomic_write, cache_root
from mtk.tokenizers import EOD_TEXT, HFTokenizer, Tokenizer

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

EDGE_CASES = (
    "", " ", "  ", "\n", "\r\n", "\r", "\t \t", "hello world", "Hello  World!!  ", "don't I'll we've they're",
    "DON'T 'S 's 'll", "1234567890 3.14159 -42 1e-9", "emoji 😀👍🏽 🇫🇷 👨‍👩‍👧 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "combining e\u0301 a\u0308 \u0915\u094d\u0937", "中文字符 日本語のテキスト 한국어", "עברית ערבית العربية",
    "nul\x00ctl\x01\x1f\x7f", "ws    runs\t\t\n\n\n   end   ", "<|endoftext|>", "a<|endoftext|>b <|endoftext|> c",
    "<|endoftext", "x" * 3000, " " * 500, "\u00a0\u2003\u3000nbsp", "\ufeffbom", "e\u200bzwsp",
    "def f(x):\n    return x ** 2  # comment\n", "https://example.com/a?b=c&d=e#f", "ÀÁÂÃÄÅ àáâãäå ß ẞ",
)

# Planes 0-3 and 14 hold every assigned code point; 4-13 are unassigned, 15-16 are private use.
_SWEEP_RANGES = ((0x0000, 0x40000), (0xE0000, 0xE1000))


class FastPathMismatch(RuntimeError):
    """Internal control flow: the fast engine disagreed with the reference on a real document, so preprocess redoes
    every shard with the reference (:func:`mtk.data_jobs.preprocess._run_shards` catches it; it never leaves)."""


class FastGPT2(Tokenizer):
    """tiktoken over a verified vocabulary, with the reference kept for the shadow check."""

    def __init__(self, encoding: Any, reference: HFTokenizer, check_every: int = 128):
        self.encoding = encoding
        self.reference = reference
        self.type = reference.type
        self.vocab_size = reference.vocab_size
        self.eod = reference.eod
        self.files = reference.files
        self.options = reference.options
        self.legacy = bool(reference.options.get("legacy_eod_as_text"))
        self.check_every = check_every
        self._seen = 0

    def _encode(self, texts: list[str]) -> list[list[int]]:
        # One call per text in this thread: tiktoken's *_batch helpers add a thread-pool round trip per text.
        enc = self.encoding
        if self.legacy:
            return [enc.encode_ordinary(t) for t in texts]
        allowed = enc.special_tokens_set
        return [enc.encode(t, allowed_special=allowed, disallowed_special=()) for t in texts]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        texts = list(texts)
        out = self._encode(texts)
        self._shadow_check(texts, out)
        return out

    def encode_batch_arrays(self, texts: Sequence[str]) -> list[Any]:
        """Like :meth:`encode_batch`, as uint32 numpy arrays straight from tiktoken's buffer: preprocess writes
        arrays, and building a Python int per token only to convert it back cost ~15 % of the encoding."""
        texts = list(texts)
        out = self._encode_arrays(texts)
        self._shadow_check(texts, out)
        return out

    def _encode_arrays(self, texts: list[str]) -> list[Any]:
        enc = self.encoding
        allowed = set() if self.legacy else enc.special_tokens_set
        return [enc.encode_to_numpy(t, allowed_special=allowed, disallowed_special=()) for t in texts]

    def _shadow_check(self, texts: list[str], out: Sequence[Any]) -> None:
        """Every ``check_every``-th document (counted across calls) encoded again by the reference; a difference
        raises :class:`FastPathMismatch`."""
        if not self.check_every:
            return
        start = (-self._seen) % self.check_every
        picks = list(range(start, len(texts), self.check_every))
        self._seen += len(texts)
        if not picks:
            return
        ref = self.reference.encode_batch([texts[i] for i in picks])
        for i, ids in zip(picks, ref, strict=True):
            got = out[i] if isinstance(out[i], list) else out[i].tolist()
            if got != ids:
                raise FastPathMismatch(f"fast BPE engine differs from the reference on a document "
                                       f"starting {texts[i][:40]!r}")


def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-ins for the 256 bytes, inverted."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(keep)
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(keep, chars, strict=True)}


def mergeable_ranks(vocab_path: str, merges_path: str) -> tuple[dict[bytes, int] | None, str]:
    """tiktoken ranks equivalent to the merges, or (None, why not)."""
    with open(vocab_path, encoding="utf-8") as fh:
        vocab: dict[str, int] = json.load(fh)
    if len(set(vocab.values())) != len(vocab):
        return None, "vocab.json has duplicate ids"
    dec = _byte_decoder()
    ranks: dict[bytes, int] = {}
    for sym, b in dec.items():
        if sym not in vocab:
            return None, f"vocab.json lacks the byte symbol {sym!r}"
        ranks[bytes([b])] = vocab[sym]
    last = -1
    with open(merges_path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\n")
            if (lineno == 1 and line.startswith("#version")) or not line:
                continue
            a, b_sym = line.split(" ")
            try:
                key = bytes(dec[c] for c in a + b_sym)
            except KeyError:
                return None, f"merges line {lineno} has a non-byte-level symbol"
            token_id = vocab[a + b_sym]
            if key in ranks:
                return None, f"merges line {lineno} repeats a merge result"
            if token_id <= last:
                return None, f"merge result ids do not increase with merge order (line {lineno})"
            ranks[key] = last = token_id
    return ranks, ""


def _sweep_texts() -> list[str]:
    texts, buf = [], []
    for lo, hi in _SWEEP_RANGES:
        for cp in range(lo, hi):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            c = chr(cp)
            buf.append(f" a{c}1{c} {c}\n")
            if len(buf) == 256:
                texts.append("".join(buf))
                buf = []
    texts.append("".join(buf))
    return texts


def _token_texts(ranks: dict[bytes, int]) -> list[str]:
    out = []
    for raw in ranks:
        try:
            out.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            continue
    return out


def _cache_file(tok: HFTokenizer) -> Path:
    import tiktoken
    import tokenizers

    return cache_root() / "bpe-verified" / f"{tok.fingerprint()}-{tokenizers.__version__}-{tiktoken.__version__}.json"


def self_test(fast: FastGPT2, ranks: dict[bytes, int]) -> str:
    """'' when the fast engine equals the reference on every probe, else the first difference."""
    probes = [*EDGE_CASES, *_token_texts(ranks), *_sweep_texts()]
    got = fast._encode(probes)
    want = fast.reference.encode_batch(probes)
    for text, a, b in zip(probes, got, want, strict=True):
        if a != b:
            return f"differs on {text[:40]!r}"
    return ""


def fast_gpt2(tok: Tokenizer, check_every: int = 128, log: Any = print, verified: bool = False) -> Tokenizer:
    """The verified fast engine for a GPT-2 BPE tokenizer, or ``tok`` itself when it cannot be trusted.

    ``verified=True`` skips the self-test (a worker process whose parent just ran it on the same files).
    """
    if tok.type != "GPT2BPETokenizer" or not isinstance(tok, HFTokenizer):
        return tok
    try:
        import tiktoken
    except ImportError:
        log("preprocess: tiktoken not installed; using the Hugging Face BPE engine")
        return tok
    ranks, why = mergeable_ranks(*tok.files)
    if ranks is None:
        log(f"preprocess: fast BPE engine not applicable ({why}); using the Hugging Face engine")
        return tok
    special = {} if tok.options.get("legacy_eod_as_text") else {EOD_TEXT: tok.eod}
    encoding = tiktoken.Encoding("mtk-gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens=special)
    fast = FastGPT2(encoding, tok, check_every=check_every)
    if verified:
        return fast
    cache = _cache_file(tok)
    verdict = json.loads(cache.read_text()) if cache.is_file() else None
    if verdict is None:
        verdict = {"ok": not (why := self_test(fast, ranks)), "why": why}
        with contextlib.suppress(OSError):  # a read-only home only costs the self-test next time
            atomic_write(cache, json.dumps(verdict))  # a unique temp name: pods all run as PID 1
    if not verdict["ok"]:
        log(f"preprocess: fast BPE engine failed its self-test ({verdict['why']}); using the Hugging Face engine")
        return tok
    return fast
