"""Reference docs are generated from code; the committed copies must be current."""

from __future__ import annotations

import pytest

from shopsim_wh import docs
from shopsim_wh.core.config import Config
from shopsim_wh.core.schema import TABLES


@pytest.mark.parametrize("name", sorted(docs.GENERATED))
def test_generated_docs_are_current(name):
    committed = (docs.DOCS / name).read_text()
    assert committed == docs.GENERATED[name](), f"docs/{name} is stale: run `python -m shopsim_wh.docs`"


def test_every_column_and_config_key_is_documented():
    schema = (docs.DOCS / "schema.md").read_text()
    for t in TABLES.values():
        assert f"## `{t.name}`" in schema
        for c in t.columns:
            assert c.doc.strip(), f"{t.name}.{c.name} has no meaning"
    config = (docs.DOCS / "config.md").read_text()
    for key in ("experiment.name", "tasks.split_manifest", "model.api_key_env", "model.sampling.max_tokens",
                "environment.dialect", "environment.persona", "model.send_seed", "model.tool_choice",
                "model.retry_backoff_s", "skills.path", "skills.mask_rate", "runtime.max_steps", "output.warehouse"):
        assert f"`{key}`" in config
    assert Config.model_config["extra"] == "forbid"


def test_every_sql_file_states_its_grain():
    from shopsim_wh.engines.db import sql_files

    files = sql_files()
    assert len(files) > 20
    for f in files:
        head = "\n".join(f.read_text().splitlines()[:6]).lower()
        assert head.startswith("--") and "grain" in head, f"{f} must open with a comment stating its grain"
