"""Analytics on top of the SQL views: the paired bare-vs-skill gate, comparisons, run summaries.

* :func:`shopsim_wh.analytics.gate.gate` fits the paired gate (sufficient statistics from SQL, the small
  solve in numpy) and returns a :class:`~shopsim_wh.analytics.gate.GateResult`.
* :mod:`shopsim_wh.analytics.compare`, :mod:`~shopsim_wh.analytics.contributions` and
  :mod:`~shopsim_wh.analytics.summary` answer the run-level questions.
* :mod:`shopsim_wh.analytics.stats` holds the Student t distribution (no scipy).

Nothing here imports typer or rich; the CLI wires these functions up.
"""

from __future__ import annotations

__all__ = ["gate"]


def __getattr__(name: str):  # lazy: `import shopsim_wh.analytics` stays light
    if name == "gate":
        from .gate import gate

        return gate
    raise AttributeError(name)
