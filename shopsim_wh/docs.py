"""Reference docs generated from code: the schema (schema.py), the config (config.py), the CLI (--help).

``python -m shopsim_wh.docs`` rewrites docs/schema.md, docs/config.md and docs/cli.md; a test fails when
the committed files differ from what the code generates.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel

from .config import Config
from .schema import PARTITION_KEY, SCHEMA_VERSION, TABLES

DOCS = Path(__file__).resolve().parent.parent / "docs"


def schema_md() -> str:
    out = [f"# Warehouse schema (version {SCHEMA_VERSION})", "",
           "Generated from `shopsim_wh/schema.py` by `python -m shopsim_wh.docs`; do not edit by hand.",
           f"Every table is Hive-partitioned by `{PARTITION_KEY}` (`<table>/{PARTITION_KEY}=<id>/part-*.parquet`), "
           "which readers get from the path. How episodes fill the tables: `conventions.md`.", ""]
    for t in TABLES.values():
        out += [f"## `{t.name}`", "", f"Grain: {t.grain}. Sort key inside a compacted file: "
                f"{', '.join(f'`{k}`' for k in t.sort_key)}.", "", "| column | type | meaning |", "| --- | --- | --- |"]
        out += [f"| `{c.name}` | {c.type} | {c.doc.replace('|', '/')} |" for c in t.columns]
        out.append("")
    return "\n".join(out)


def _model_rows(model: type[BaseModel], prefix: str) -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        key = f"{prefix}{name}"
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            rows += _model_rows(ann, key + ".")
            continue
        default = "required" if field.is_required() else repr(field.get_default(call_default_factory=True))
        rows.append(f"| `{key}` | {default} | {(field.description or '').replace('|', '/')} |")
    return rows


def config_md() -> str:
    return "\n".join(["# Config reference", "",
                      "Generated from `shopsim_wh/config.py` by `python -m shopsim_wh.docs`. Unknown keys are errors.", "",
                      "| key | default | meaning |", "| --- | --- | --- |", *_model_rows(Config, ""), ""])


def cli_md() -> str:
    from typer.testing import CliRunner

    from .cli.main import app

    runner = CliRunner()
    out = ["# CLI reference", "", "Generated from `--help` by `python -m shopsim_wh.docs`.", ""]
    commands = [[]] + [[name] for name in sorted(c.name or c.callback.__name__ for c in app.registered_commands)]
    commands += [[g.name, c.name or c.callback.__name__] for g in app.registered_groups for c in g.typer_instance.registered_commands]
    for cmd in commands:
        res = runner.invoke(app, [*cmd, "--help"], prog_name="shopsim-wh", terminal_width=100,
                            env={"NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "100"})
        if res.exit_code != 0:
            raise RuntimeError(f"shopsim-wh {' '.join(cmd)} --help failed: {res.output}")
        text = "\n".join(line.rstrip() for line in res.output.strip("\n").splitlines())
        out += [f"## `{' '.join(['shopsim-wh', *cmd])}`", "", "```text", text, "```", ""]
    return "\n".join(out)


def export_md() -> str:
    from .export.describe import export_doc

    return export_doc()


GENERATED = {"schema.md": schema_md, "config.md": config_md, "cli.md": cli_md, "export.md": export_md}


def main() -> None:
    for name, fn in GENERATED.items():
        (DOCS / name).write_text(fn())
        print(f"wrote docs/{name}", file=sys.stderr)


if __name__ == "__main__":
    main()
