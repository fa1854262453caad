"""Put on PYTHONPATH by test_training_quiet_run.py: every rank of the run, once the engine imports megatron-core's
optimizer package (long after ``quiet.install()``), issues one warning nobody listed as noise. It must reach the
run's log — proof that the silencing is by message, not a blanket filter."""

import importlib.abc
import sys
import warnings

MESSAGE = "mtk-test: an unexpected warning in the middle of a run"


class _WarnOnImport(importlib.abc.MetaPathFinder):
    fired = False

    def find_spec(self, name, path, target=None):
        if name == "megatron.core.optimizer" and not self.fired:
            self.fired = True
            warnings.warn(MESSAGE, UserWarning, stacklevel=2)
        return None


sys.meta_path.insert(0, _WarnOnImport())
