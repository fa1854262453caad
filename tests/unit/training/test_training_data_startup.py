"""What the data path imports at a rank's start-up (in a fresh interpreter: imports are process-wide)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def test_null_tokenizer_is_megatrons_own_class_without_importing_transformers():
    code = textwrap.dedent("""
        import json, sys
        from mtk.training import compat
        compat.install_import_stubs()
        from mtk.training.data import null_tokenizer_class
        cls = null_tokenizer_class()
        out = {"transformers_after_load": "transformers" in sys.modules, "again": null_tokenizer_class() is cls}
        tok = cls(500, eod_id=499)
        out["ids"] = [tok.vocab_size, tok.eod, tok.unique_identifiers["class"]]
        from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer
        from megatron.core.tokenizers.text.libraries import NullTokenizer as exported
        out["same_class"] = NullTokenizer is cls and exported is cls
        print(json.dumps(out))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["transformers_after_load"] is False
    assert out["again"] is True
    # the datasets' cache keys name the class: the same name as through the package
    assert out["ids"] == [500, 499, "megatron.core.tokenizers.text.libraries.null_tokenizer.NullTokenizer"]
    assert out["same_class"] is True  # a later import through the package finds the same module
