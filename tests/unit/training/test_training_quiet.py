"""Known noise is silenced by exact message; an unexpected warning still shows."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import logging, warnings
from mtk.training import quiet
quiet.install()
warnings.warn("Apex is not installed. Falling back to Torch Norm")
warnings.warn("something nobody expected")
torch_log = logging.getLogger("megatron.core.dist_checkpointing.strategies.torch")
torch_log.warning("MCore's async save is deprecated and will be removed in the future releases. Please, use NVRx")
torch_log.warning("a real checkpoint problem")
logging.getLogger("megatron.core.other").warning("MCore's async save is deprecated (elsewhere: not ours to hide)")
"""


def test_known_warnings_are_silenced_and_unexpected_ones_show():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Apex is not installed" not in out.stderr
    assert "something nobody expected" in out.stderr
    assert "NVRx" not in out.stderr and "a real checkpoint problem" in out.stderr
    assert "(elsewhere: not ours to hide)" in out.stderr


def test_megatron_apex_warnings_vanish_from_a_real_import():
    code = ("import warnings\nwarnings.simplefilter('default')\nfrom mtk.training import compat, quiet\n"
            "compat.install_import_stubs()\nquiet.install()\n"
            "from megatron.core.models.gpt import gpt_layer_specs\nprint('imported')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "imported" in out.stdout, out.stderr
    assert "Apex is not installed" not in out.stderr


DEVICE_SCRIPT = r"""
import sys, warnings
from mtk.training import quiet
quiet.install()
quiet.for_device(sys.argv[1])
warnings.warn("When using sequence parallelism it is recommended to set the environment variable "
              "CUDA_DEVICE_MAX_CONNECTIONS to 1 for maximum speedup")
warnings.warn("When using async grad allreduce it is recommended to set the environment variable "
              "CUDA_DEVICE_MAX_CONNECTIONS to 1 for maximum speedup")
warnings.warn("CUDA_DEVICE_MAX_CONNECTIONS is something else entirely")
"""


def test_cuda_connection_advice_is_silenced_on_cpu_only():
    cpu = subprocess.run([sys.executable, "-c", DEVICE_SCRIPT, "cpu"], capture_output=True, text=True, timeout=120)
    assert cpu.returncode == 0, cpu.stderr
    assert "it is recommended" not in cpu.stderr
    assert "something else entirely" in cpu.stderr
    gpu = subprocess.run([sys.executable, "-c", DEVICE_SCRIPT, "gpu"], capture_output=True, text=True, timeout=120)
    assert gpu.stderr.count("it is recommended to set the environment variable CUDA_DEVICE_MAX_CONNECTIONS") == 2


def test_megatron_log_notices_are_dropped_by_logger_and_message():
    code = ("import logging\nfrom mtk.training import quiet\nquiet.install()\n"
            "logging.getLogger('megatron.core.models.gpt.gpt_model').warning('GPTModel IS DEPRECATED. GPTModel is "
            "only accepting critical bug fixes, no new features.')\n"
            "logging.getLogger('megatron.core.rerun_state_machine').warning("
            "'Implicit initialization of Rerun State Machine!')\n"
            "logging.getLogger('megatron.core.rerun_state_machine').warning("
            "'RerunStateMachine initialized in mode RerunMode.DISABLED')\n"
            "logging.getLogger('megatron.core.rerun_state_machine').warning('RerunStateMachine initialized in mode "
            "RerunMode.VALIDATE_RESULTS')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "DEPRECATED" not in out.stderr and "Implicit" not in out.stderr and "DISABLED" not in out.stderr
    assert "VALIDATE_RESULTS" in out.stderr, "a mode someone chose still shows"
