"""shopsim-wh: a columnar trace warehouse with SQL analytics for LLM-agent rollouts.

Library first: ``shopsim_wh.db.connect(warehouse)`` gives a DuckDB connection with every view;
``shopsim_wh.runner.run(config)`` runs a rollout; the CLI (``shopsim_wh.cli``) is a thin layer.
"""

__version__ = "0.1.0"
