"""mtk: one typed job spec and one CLI that take a Megatron pretraining run from a laptop to a GPU cluster.

The subpackages live in top-level folders of the source tree (``launcher/`` is ``mtk.launcher``, and so on);
``setup.py`` maps them. This module stays import-free so that ``mtk --help`` starts fast.
"""

__version__ = "0.1.0"
