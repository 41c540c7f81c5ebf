"""Render a :class:`~.build.Report` as one self-contained HTML file.

Everything the page needs is inline: the vendored Vega, Vega-Lite and vega-embed builds (``vendor/``, see its
SOURCES.md), the CSS, every chart's spec and data. A Content-Security-Policy forbids any fetch, so the page
works offline and cannot leak a request. Each chart's data is also a ``<details>`` table, for readers without
JavaScript and for copying numbers.
"""

from __future__ import annotations

import functools
import json
import re
from html import escape
from importlib import resources

from .build import Report, Section, Table
from .charts import Chart

VENDOR = ("vega.min.js", "vega-lite.min.js", "vega-embed.min.js")
CSP = ("default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
       "img-src data: blob:; font-src data:; connect-src 'none'")

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{background:#1f2933;color:#fff;padding:18px 28px}header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;color:#cbd2d9}nav{padding:8px 28px;background:#e4e7eb}nav a{margin-right:14px;color:#1f2933}
main{padding:8px 28px 40px;max-width:1320px}.charts{display:flex;flex-wrap:wrap;gap:4px 28px}section{background:#fff;border:1px solid #e4e7eb;border-radius:6px;
padding:4px 18px 16px;margin:18px 0}h2{font-size:18px}figure{margin:14px 0;max-width:100%}.chart{min-height:40px}
table{border-collapse:collapse;font-size:12px;margin:6px 0}th,td{border:1px solid #d9dde2;padding:3px 7px;
text-align:right;white-space:nowrap}th{background:#f0f2f5}td.s{text-align:left}.scroll{overflow-x:auto}
table.runs th{white-space:normal;vertical-align:bottom}
table.runs td.s{white-space:normal;overflow-wrap:break-word;max-width:16em}h3{font-size:15px;margin:18px 0 2px}
.part{border-top:1px solid #e4e7eb;margin-top:10px}
details summary{cursor:pointer;color:#52606d}.note{color:#52606d;margin:6px 0}
.badge{display:inline-block;padding:1px 9px;border-radius:10px;font-size:13px;margin-left:8px;color:#fff}
.badge.pass{background:#2a9d8f}.badge.fail{background:#e76f51}.badge.refused{background:#7b8794}
"""

RENDER_JS = """
(function () {
  var opts = {actions: false, renderer: "svg"};
  var jobs = [];
  document.querySelectorAll('script[type="application/json"][data-chart]').forEach(function (s) {
    var id = s.getAttribute("data-chart"), el = document.getElementById(id);
    jobs.push(vegaEmbed(el, JSON.parse(s.textContent), opts).then(function () {
      el.setAttribute("data-drawn", "ok");
    }).catch(function (err) {
      el.setAttribute("data-drawn", "error");
      el.textContent = "chart failed to draw: " + err + " (the data is in the table below)";
      console.error("chart " + id + ": " + err);
    }));
  });
  Promise.all(jobs).then(function () { document.body.setAttribute("data-charts", "done"); });
})();
"""


@functools.cache
def vendored_js() -> str:
    """The three vendored builds, their trailing source-map comments dropped (the maps are not shipped)."""
    root = resources.files("shopsim_wh.report") / "vendor"
    parts = []
    for name in VENDOR:
        code = re.sub(r"\n?//# sourceMappingURL=\S+\s*$", "", (root / name).read_text(encoding="utf-8"))
        parts.append(f"/* {name}: see shopsim_wh/report/vendor/SOURCES.md and LICENSE.* (BSD-3-Clause) */\n{code}")
    return "\n".join(parts)


def _json_script(obj) -> str:
    """JSON that is safe inside <script>: no '</' or '<!--' can close or confuse the element."""
    return json.dumps(obj, allow_nan=False, default=str).replace("<", "\\u003c")


ABBREVIATE = 24  # longer text in a run table is shortened in the middle, the full value in the cell's title


def _short(text: str) -> str:
    """``text`` shortened in the middle to ABBREVIATE characters (ids differ at both ends: source and hash)."""
    if len(text) <= ABBREVIATE:
        return text
    head = (ABBREVIATE - 1) // 2
    return text[:head] + "\u2026" + text[-(ABBREVIATE - 1 - head):]


def _cell(v, abbreviate: bool = False) -> str:
    if abbreviate and isinstance(v, str):
        return f'<td class=s title="{escape(v)}">{escape(_short(v))}</td>'
    if v is None:
        return "<td></td>"
    if isinstance(v, bool):
        return f"<td class=s>{'yes' if v else 'no'}</td>"
    if isinstance(v, float):
        return f"<td>{v:.4g}</td>" if abs(v) >= 1e4 or (v != 0 and abs(v) < 1e-3) else f"<td>{v:.4f}</td>"
    if isinstance(v, int):
        return f"<td>{v:,}</td>"
    return f"<td class=s>{escape(str(v))}</td>"


def _table(columns: list[str], rows: list[dict], units: dict[str, str] | None = None, abbreviate: bool = False) -> str:
    """A table; ``abbreviate``: a run table, fitted to the page (text wraps, long ids shortened, see CSS)."""
    units = units or {}
    head = "".join(f"<th>{escape(c)}{escape(' (' + units[c] + ')') if c in units else ''}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_cell(r.get(c), abbreviate) for c in columns) + "</tr>" for r in rows)
    cls = ' class="runs"' if abbreviate else ""
    return f'<div class="scroll"><table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _chart(c: Chart) -> str:
    cid = f"chart-{c.key}"
    return (f'<figure><div class="chart" id="{cid}" role="img" aria-label="{escape(c.title)}"></div>'
            f'<script type="application/json" data-chart="{cid}">{_json_script(c.spec)}</script>'
            f"<details><summary>Data: {escape(c.title)} ({len(c.rows)} rows)</summary>"
            f"{_table(c.columns, c.rows, c.units)}</details></figure>")


def _plain_table(t: Table, level: int) -> str:
    rows = _table(t.columns, t.rows, abbreviate=t.abbreviate) if t.rows else '<p class="note">No rows.</p>'
    return (f"<h{level}>{escape(t.title)}</h{level}>" if t.title else "") + rows


def _section(s: Section, level: int = 2) -> str:
    """A section (``<section>``, h2) or one of a domain's parts (``<div class="part">``, h3)."""
    badge = f' <span class="badge {escape(s.badge)}">{escape(s.badge.upper())}</span>' if s.badge else ""
    tag = "section" if level == 2 else 'div class="part"'
    parts = [f'<{tag} id="{escape(s.key)}"><h{level}>{escape(s.title)}{badge}</h{level}>'
             f'<p class="note">{escape(s.intro)}</p>']
    parts += [f'<p class="note">{escape(n)}</p>' for n in s.notes]
    parts += [_plain_table(t, level + 1) for t in s.tables]
    if s.charts:
        parts.append('<div class="charts">' + "".join(_chart(c) for c in s.charts) + "</div>")
    parts += [_section(p, level + 1) for p in s.parts]
    parts.append("</section>" if level == 2 else "</div>")
    return "\n".join(parts)


def render(report: Report) -> str:
    nav = "".join(f'<a href="#{escape(s.key)}">{escape(s.title)}</a>' for s in report.sections)
    per = "a checkpoint's runs pooled (--group-by checkpoint)" if report.group_by == "checkpoint" else "one series per run"
    sub = (f"{len(report.run_ids)} run(s) from {escape(report.warehouse)}, {per} · generated "
           f"{escape(report.generated_at)} by shopsim-wh {escape(report.tool_version)}")
    body = "\n".join(_section(s) for s in report.sections)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(report.title)}</title><style>{CSS}</style>
<script>{vendored_js()}</script></head>
<body><header><h1>{escape(report.title)}</h1><p>{sub}</p></header><nav>{nav}</nav>
<main>
{body}
</main>
<script>{RENDER_JS}</script>
</body></html>
"""
