"""The modules' homes before the layer packages (0.1.0, issue 29): ``import shopsim_wh.warehouse`` still works,
gives the very module ``shopsim_wh.store.warehouse`` (so a patch through either name reaches the same code) and
warns with a DeprecationWarning naming the new path. The old paths go in 0.4.0; CHANGELOG.md lists them."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

REMOVED_IN = "0.4.0"
MOVED = {f"shopsim_wh.{old}": f"shopsim_wh.{new}" for old, new in {
    "analytics.synth": "demo.shop",
    "analytics.synth_coding": "demo.coding",
    "catalog": "engines.catalog",
    "check": "ops.check",
    "committer": "rollout.committer",
    "compaction": "store.compaction",
    "config": "core.config",
    "config_import": "core.config_import",
    "crash": "core.crash",
    "db": "engines.db",
    "doctor": "ops.doctor",
    "environment": "rollout.environment",
    "errors": "core.errors",
    "execution": "rollout.execution",
    "fsio": "core.fsio",
    "ingest.synth_v4": "demo.shopsimrl_v4",
    "jobs": "rollout.jobs",
    "ledger": "store.ledger",
    "maintenance": "store.maintenance",
    "model": "rollout.model",
    "names": "core.names",
    "prompts": "rollout.prompts",
    "protocol_codes": "core.protocol_codes",
    "ray_executor": "rollout.ray_executor",
    "run_identity": "core.run_identity",
    "runlock": "store.runlock",
    "runner": "rollout.runner",
    "runtime": "rollout.runtime",
    "sandbox": "engines.sandbox",
    "schema": "core.schema",
    "skills": "rollout.skills",
    "spark": "engines.spark",
    "spark_export": "export.spark",
    "spark_guard": "engines.spark_guard",
    "spark_sql": "engines.spark_sql",
    "splits": "core.splits",
    "sqltext": "core.sqltext",
    "storage": "store.storage",
    "summary": "analytics.summary",
    "synth_reasoning": "demo.reasoning",
    "warehouse": "store.warehouse",
}.items()}


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        warnings.warn(f"{spec.name} is now {self.new}; the old path goes in {REMOVED_IN}", DeprecationWarning,
                      stacklevel=4)
        return importlib.import_module(self.new)

    def exec_module(self, module) -> None:  # the new module is already executed
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        new = MOVED.get(fullname)
        return importlib.util.spec_from_loader(fullname, _Alias(new)) if new else None


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
