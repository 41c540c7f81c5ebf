"""shopsim-wh: a columnar trace warehouse with SQL analytics for LLM-agent rollouts.

Library first: ``shopsim_wh.engines.db.connect(warehouse)`` gives a DuckDB connection with every view;
``shopsim_wh.rollout.runner.run(config)`` runs a rollout; the CLI (``shopsim_wh.cli``) is a thin layer.
"""

__version__ = "0.1.0"

from .core import moved as _moved

_moved.install()  # the pre-0.1.0 module paths, deprecated (shopsim_wh.core.moved)
