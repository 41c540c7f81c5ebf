"""Vega-Lite specs for the report's charts: plain dicts, data inline, every axis titled with its unit.

Each builder takes a :class:`ChartData` (key, title, the rows of one query as a list of dicts, the table's
columns) and the :class:`Axis` values it draws, and returns a :class:`Chart`: the spec plus the rows and
columns the page prints as the chart's table fallback. Builders never query; :mod:`.build` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"  # an identifier vega-embed parses, never fetched
WIDTH = 420
BAND, MIN_H, MAX_H = 22, 44, 440  # px per bar row of a bar chart, and the least and most plot height
PLOT_H = 180  # plot height of charts whose rows are not bars (histograms, curves, per-task deltas)
LEGEND = {"symbolLimit": 12, "labelLimit": 180}  # more series: "... n entries", the data table has them all


@dataclass
class Chart:
    key: str
    title: str
    spec: dict
    rows: list[dict]
    columns: list[str]
    units: dict[str, str] = field(default_factory=dict)  # column -> unit, shown in the table header


@dataclass(frozen=True)
class ChartData:
    """What every chart has besides its spec: key (the element id), title, the query's rows, and the columns
    (and their units) of the table printed as the chart's fallback."""

    key: str
    title: str
    rows: list[dict]
    columns: list[str] = field(default_factory=list)  # empty: the builder's default (mean_sem_bars) or none
    units: dict[str, str] = field(default_factory=dict)  # column -> unit, shown in the table header

    def chart(self, spec: dict, columns: list[str] | None = None) -> Chart:
        """The :class:`Chart` of ``spec`` over these rows; ``columns`` overrides the table's columns."""
        return Chart(self.key, self.title, spec, self.rows, self.columns if columns is None else columns,
                     dict(self.units))


@dataclass(frozen=True)
class Axis:
    """A column drawn on one channel (x, y, colour, ...) and the title its axis or legend shows, with the
    unit."""

    column: str
    title: str


def band_height(bars: int) -> int:
    """The plot height of a chart with ``bars`` bar rows: BAND px each, within MIN_H .. MAX_H."""
    return max(MIN_H, min(MAX_H, bars * BAND))


def _count(rows: list[dict], *fields: str) -> int:
    return len({tuple(r.get(f) for f in fields) for r in rows})


def _spec(title: str, rows: list[dict], layers_or_mark: dict, bars: int | None = None, **extra) -> dict:
    """A top-level spec; ``bars``: the number of bar rows, which sets the height (recorded in ``usermeta``)."""
    spec = {"$schema": SCHEMA, "title": title, "data": {"values": rows}, "width": WIDTH,
            "height": PLOT_H if bars is None else band_height(bars),
            "config": {"view": {"stroke": None}, "axis": {"labelLimit": 220}, "legend": LEGEND}}
    if bars is not None:
        spec["usermeta"] = {"bars": bars}
    spec.update(layers_or_mark)
    spec.update(extra)
    return spec


def _q(fld: str, title: str, **kw) -> dict:
    return {"field": fld, "type": "quantitative", "title": title, **kw}


def _n(fld: str, title: str, **kw) -> dict:
    return {"field": fld, "type": "nominal", "title": title, **kw}


def _tooltip(*fields: str) -> list[dict]:
    return [{"field": f} for f in fields]


def mean_sem_bars(data: ChartData, y: Axis, color: Axis, x_title: str, facet: str | None = None) -> Chart:
    """One horizontal bar of ``mean`` per ``y`` value (in data order) with a rule from ``lo`` to ``hi``
    (mean -/+ SEM), coloured by ``color``; ``facet`` splits into columns sharing the rows."""
    rows = data.rows
    enc = {"y": _n(y.column, y.title, sort=None)}
    tooltip = _tooltip(*(data.columns or [y.column, color.column, "mean", "sem", "n"]))
    layer = {"layer": [
        {"mark": {"type": "bar"}, "encoding": {**enc, "x": _q("mean", x_title),
                                                "color": _n(color.column, color.title, sort=None),
                                                "tooltip": tooltip}},
        {"mark": {"type": "rule", "strokeWidth": 1.5, "color": "#222"},
         "encoding": {**enc, "x": _q("lo", x_title), "x2": {"field": "hi"}}},
    ]}
    bars = _count(rows, y.column)
    if facet:
        spec = {"$schema": SCHEMA, "title": data.title, "data": {"values": rows}, "usermeta": {"bars": bars},
                "facet": {"column": _n(facet, None)},
                "spec": {"width": WIDTH // 2 - 20, "height": band_height(bars), **layer},
                "config": {"view": {"stroke": None}, "axis": {"labelLimit": 220}, "legend": LEGEND}}
    else:
        spec = _spec(data.title, rows, layer, bars=bars)
    cols = data.columns or ([c for c in (y.column, color.column, facet, "n", "mean", "sem", "lo", "hi") if c]
                            if rows else [])
    return data.chart(spec, list(dict.fromkeys(cols)))


def grouped_bars(data: ChartData, cat: Axis, value: Axis, color: Axis, stack: bool = False) -> Chart:
    """Horizontal bars of ``value`` per ``cat`` (in data order), one bar per ``color`` value side by side, or
    stacked into one with ``stack``; the height follows the number of bars."""
    enc = {"y": _n(cat.column, cat.title, sort=None),
           "x": _q(value.column, value.title, **({} if stack else {"stack": None})),
           "color": _n(color.column, color.title, sort=None), "tooltip": _tooltip(*data.columns)}
    if not stack:
        enc["yOffset"] = {"field": color.column}
    bars = _count(data.rows, cat.column) * (1 if stack else max(1, _count(data.rows, color.column)))
    return data.chart(_spec(data.title, data.rows, {"mark": {"type": "bar"}, "encoding": enc}, bars=bars))


def histogram(data: ChartData, x: Axis, end: str | None, y_title: str, series_title: str) -> Chart:
    """Binned counts per series (``grp``), drawn as translucent bars over each other. ``x``: the bin's lower
    edge; ``end``: its upper edge (quantitative bins), None for integer values (one ordinal bar per value)."""
    if end:
        xenc = _q(x.column, x.title, bin={"binned": True})
        extra = {"x2": {"field": end}}
    else:
        xenc = {"field": x.column, "type": "ordinal", "title": x.title, "axis": {"labelAngle": 0}}
        extra = {}
    enc = {"x": xenc, **extra, "y": _q("episodes", y_title, stack=None),
           "color": _n("grp", series_title, sort=None), "tooltip": _tooltip(*data.columns)}
    mark = {"type": "bar", "opacity": 0.55}
    return data.chart(_spec(data.title, data.rows, {"mark": mark, "encoding": enc}))


def heatmap(data: ChartData, x: Axis, y: Axis, value: Axis) -> Chart:
    """One cell per (``x``, ``y``), shaded by ``value``."""
    enc = {"x": {"field": x.column, "type": "ordinal", "title": x.title, "axis": {"labelAngle": 0}},
           "y": _n(y.column, y.title), "color": _q(value.column, value.title, scale={"scheme": "oranges"}),
           "tooltip": _tooltip(*data.columns)}
    return data.chart(_spec(data.title, data.rows, {"mark": {"type": "rect"}, "encoding": enc},
                            bars=_count(data.rows, y.column)))


def lines(data: ChartData, x: Axis, value_title: str, fold: list[str], series_title: str) -> Chart:
    """One line per series (``grp``) and measure (``fold``: the columns drawn, as dash styles)."""
    enc = {"x": {"field": x.column, "type": "quantitative", "title": x.title, "axis": {"tickMinStep": 1}},
           "y": _q("value", value_title, scale={"domain": [0, 1]}), "color": _n("grp", series_title, sort=None),
           "strokeDash": _n("measure", "measure"), "tooltip": _tooltip(x.column, "grp", "measure", "value")}
    spec = _spec(data.title, data.rows, {"transform": [{"fold": fold, "as": ["measure", "value"]},
                                                       {"filter": "isValid(datum.value)"}],
                                         "mark": {"type": "line", "point": True}, "encoding": enc})
    return data.chart(spec)


def estimates(data: ChartData, x_title: str) -> Chart:
    """Points at ``beta`` with a rule over the confidence interval, and a zero line."""
    y, columns = _n("name", "covariate"), data.columns
    spec = _spec(data.title, data.rows, bars=_count(data.rows, "name"), layers_or_mark={"layer": [
        {"mark": {"type": "rule", "strokeWidth": 2}, "encoding": {
            "y": y, "x": _q("ci_low", x_title), "x2": {"field": "ci_high"}, "tooltip": _tooltip(*columns)}},
        {"mark": {"type": "point", "filled": True, "size": 80}, "encoding": {
            "y": y, "x": _q("beta", x_title), "color": _n("verdict", "verdict"), "tooltip": _tooltip(*columns)}},
        {"data": {"values": [{"zero": 0}]}, "mark": {"type": "rule", "strokeDash": [4, 4], "color": "#888"},
         "encoding": {"x": {"field": "zero", "type": "quantitative"}}},
    ]})
    return data.chart(spec)


def deltas(data: ChartData, y_title: str) -> Chart:
    """One bar per task, sorted by delta, coloured by its sign."""
    enc = {"x": {"field": "task", "type": "nominal", "title": "task (sorted by delta)", "sort": "-y",
                 "axis": {"labels": len(data.rows) <= 40, "labelAngle": -60}},
           "y": _q("delta", y_title),
           "color": {"field": "sign", "type": "nominal", "title": "effect",
                     "scale": {"domain": ["helped", "no change", "hurt"], "range": ["#2a9d8f", "#bbbbbb", "#e76f51"]}},
           "tooltip": _tooltip(*data.columns)}
    return data.chart(_spec(data.title, data.rows, {"mark": {"type": "bar"}, "encoding": enc}))
