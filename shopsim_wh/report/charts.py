"""Vega-Lite specs for the report's charts: plain dicts, data inline, every axis titled with its unit.

Each builder takes the rows of one query (list of dicts) and returns a :class:`Chart`: the spec plus the rows and
columns the page prints as the chart's table fallback. Builders never query; :mod:`.build` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"  # an identifier vega-embed parses, never fetched
WIDTH = 420


@dataclass
class Chart:
    key: str
    title: str
    spec: dict
    rows: list[dict]
    columns: list[str]
    units: dict[str, str] = field(default_factory=dict)  # column -> unit, shown in the table header


def _spec(title: str, rows: list[dict], layers_or_mark: dict, **extra) -> dict:
    spec = {"$schema": SCHEMA, "title": title, "data": {"values": rows}, "width": WIDTH,
            "config": {"view": {"stroke": None}, "axis": {"labelLimit": 220}}}
    spec.update(layers_or_mark)
    spec.update(extra)
    return spec


def _q(fld: str, title: str, **kw) -> dict:
    return {"field": fld, "type": "quantitative", "title": title, **kw}


def _n(fld: str, title: str, **kw) -> dict:
    return {"field": fld, "type": "nominal", "title": title, **kw}


def _tooltip(*fields: str) -> list[dict]:
    return [{"field": f} for f in fields]


def mean_sem_bars(key: str, title: str, rows: list[dict], x: str, x_title: str, color: str, color_title: str,
                  y_title: str, facet: str | None = None, offset: bool = True, units: dict | None = None) -> Chart:
    """Bars of ``mean`` with a rule from ``lo`` to ``hi`` (mean -/+ SEM); with ``offset`` the ``color`` values sit
    side by side within each x, else ``color`` only colours (one value per x); ``facet`` splits into columns."""
    enc = {"x": _n(x, x_title, axis={"labelAngle": -30}), "color": _n(color, color_title)}
    if offset:
        enc["xOffset"] = {"field": color}
    layer = {"layer": [
        {"mark": {"type": "bar"}, "encoding": {**enc, "y": _q("mean", y_title),
                                                "tooltip": _tooltip(x, color, "mean", "sem", "n")}},
        {"mark": {"type": "rule", "strokeWidth": 1.5, "color": "#222"},
         "encoding": {**{k: v for k, v in enc.items() if k != "color"}, "y": _q("lo", y_title), "y2": {"field": "hi"}}},
    ]}
    if facet:
        spec = {"$schema": SCHEMA, "title": title, "data": {"values": rows},
                "facet": {"column": _n(facet, None)}, "spec": {"width": WIDTH // 2 - 20, **layer},
                "resolve": {"scale": {"y": "independent"}}, "config": {"view": {"stroke": None}}}
    else:
        spec = _spec(title, rows, layer)
    cols = [c for c in (x, color, facet, "n", "mean", "sem", "lo", "hi") if c] if rows else []
    return Chart(key, title, spec, rows, list(dict.fromkeys(cols)), units or {})


def grouped_bars(key: str, title: str, rows: list[dict], x: str, x_title: str, y: str, y_title: str,
                 color: str, color_title: str, columns: list[str], horizontal: bool = False, stack: bool = False,
                 units: dict | None = None) -> Chart:
    cat = _n(x, x_title, sort=None, axis={"labelAngle": 0 if horizontal else -30})
    val = _q(y, y_title, **({} if stack else {"stack": None}))
    enc = {"color": _n(color, color_title), "tooltip": _tooltip(*columns)}
    if horizontal:
        enc.update({"y": cat, "x": val, **({} if stack else {"yOffset": {"field": color}})})
    else:
        enc.update({"x": cat, "y": val, **({} if stack else {"xOffset": {"field": color}})})
    return Chart(key, title, _spec(title, rows, {"mark": {"type": "bar"}, "encoding": enc}), rows, columns, units or {})


def histogram(key: str, title: str, rows: list[dict], start: str, end: str | None, x_title: str, y_title: str,
              columns: list[str], units: dict | None = None) -> Chart:
    """Binned counts per run, drawn as translucent bars over each other. ``end``: the bin's upper edge
    (quantitative bins); None for integer values (one ordinal bar per value)."""
    if end:
        x = _q(start, x_title, bin={"binned": True})
        extra = {"x2": {"field": end}}
    else:
        x = {"field": start, "type": "ordinal", "title": x_title, "axis": {"labelAngle": 0}}
        extra = {}
    enc = {"x": x, **extra, "y": _q("episodes", y_title, stack=None), "color": _n("run_id", "run"),
           "tooltip": _tooltip(*columns)}
    mark = {"type": "bar", "opacity": 0.55}
    return Chart(key, title, _spec(title, rows, {"mark": mark, "encoding": enc}), rows, columns, units or {})


def heatmap(key: str, title: str, rows: list[dict], x: str, x_title: str, y: str, y_title: str, value: str,
            value_title: str, columns: list[str]) -> Chart:
    enc = {"x": {"field": x, "type": "ordinal", "title": x_title, "axis": {"labelAngle": 0}},
           "y": _n(y, y_title), "color": _q(value, value_title, scale={"scheme": "oranges"}),
           "tooltip": _tooltip(*columns)}
    return Chart(key, title, _spec(title, rows, {"mark": {"type": "rect"}, "encoding": enc}), rows, columns)


def lines(key: str, title: str, rows: list[dict], x: str, x_title: str, value_title: str, fold: list[str],
          columns: list[str]) -> Chart:
    """One line per run and measure (``fold``: the columns drawn, as dash styles)."""
    enc = {"x": {"field": x, "type": "quantitative", "title": x_title, "axis": {"tickMinStep": 1}},
           "y": _q("value", value_title, scale={"domain": [0, 1]}), "color": _n("run_id", "run"),
           "strokeDash": _n("measure", "measure"), "tooltip": _tooltip(x, "run_id", "measure", "value")}
    spec = _spec(title, rows, {"transform": [{"fold": fold, "as": ["measure", "value"]},
                                             {"filter": "isValid(datum.value)"}],
                               "mark": {"type": "line", "point": True}, "encoding": enc})
    return Chart(key, title, spec, rows, columns)


def estimates(key: str, title: str, rows: list[dict], columns: list[str], x_title: str) -> Chart:
    """Points at ``beta`` with a rule over the confidence interval, and a zero line."""
    y = _n("name", "covariate")
    spec = _spec(title, rows, {"layer": [
        {"mark": {"type": "rule", "strokeWidth": 2}, "encoding": {
            "y": y, "x": _q("ci_low", x_title), "x2": {"field": "ci_high"}, "tooltip": _tooltip(*columns)}},
        {"mark": {"type": "point", "filled": True, "size": 80}, "encoding": {
            "y": y, "x": _q("beta", x_title), "color": _n("verdict", "verdict"), "tooltip": _tooltip(*columns)}},
        {"data": {"values": [{"zero": 0}]}, "mark": {"type": "rule", "strokeDash": [4, 4], "color": "#888"},
         "encoding": {"x": {"field": "zero", "type": "quantitative"}}},
    ]})
    return Chart(key, title, spec, rows, columns)


def deltas(key: str, title: str, rows: list[dict], columns: list[str], y_title: str) -> Chart:
    """One bar per task, sorted by delta, coloured by its sign."""
    enc = {"x": {"field": "task", "type": "nominal", "title": "task (sorted by delta)", "sort": "-y",
                 "axis": {"labels": len(rows) <= 40, "labelAngle": -60}},
           "y": _q("delta", y_title),
           "color": {"field": "sign", "type": "nominal", "title": "effect",
                     "scale": {"domain": ["helped", "no change", "hurt"], "range": ["#2a9d8f", "#bbbbbb", "#e76f51"]}},
           "tooltip": _tooltip(*columns)}
    return Chart(key, title, _spec(title, rows, {"mark": {"type": "bar"}, "encoding": enc}), rows, columns)
