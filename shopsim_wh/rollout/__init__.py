"""Frozen split -> deterministic jobs -> concurrent episodes -> committed tables.

Jobs, the model and environment clients (the package's one HTTP seam each), prompts, skills, the agent runtime,
the committer, the executors (threads, Ray) and :func:`.runner.run`. Imports ``core``, ``store`` and ``sim``
(the embedded default environment).
"""
