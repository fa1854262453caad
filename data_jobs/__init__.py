"""mtk.data_jobs: the data steps every backend runs before training.

- ``getdata``    fetch ``data.fetch`` items into ``data.dir`` (resumable, verified, streamed decompression)
- ``preprocess`` JSONL -> Megatron ``{prefix}_{key}_document.bin/.idx`` (exact, sharded, resumable)
- ``tokenizers`` ``build_tokenizer(spec, data_dir)``: vocab size (added tokens included), EOD, encode
- ``bpe_fast``   the verified tiktoken engine preprocess uses for GPT-2 BPE when it gives identical ids
- ``mixture``    ``expand_folders(data)``: weighted folders of prefixes -> blend, validation, table
- ``indexed``    the streamed ``.bin/.idx`` writer; ``jsonl`` input files, shards, line-level errors

Modules import their heavy dependencies (numpy, tokenizers, tiktoken, sentencepiece, boto3) inside functions.
"""
