"""Checkpoint interoperability: Megatron-LM's common state (``megatron_lm``) and Hugging Face (``hf``)."""
