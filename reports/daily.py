"""`write_report(data_dir, date)`: the day's report as one self-contained HTML file, a PNG per
chart and ``D.json`` with the headline numbers.

The HTML inlines Vega, Vega-Lite and vega-embed (vl-convert's bundle), so it opens offline
and can be mailed. Every number comes from warehouse tables through the read-only connection
(the same one as ``wattline sql``), check results from the Dagster instance, and quarantined
rows from ``<data-dir>/quarantine/``. A section whose table does not exist yet says so.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import logging
import os
import re
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from altair.utils.schemapi import debug_mode

from reports import charts
from reports.data import Reader, run_history
from reports.sections import SECTIONS
from reports.sections.base import Chart, Code, Collapsed, Ctx, Note, Section, Table

log = logging.getLogger(__name__)

MAX_HTML_BYTES = 5 * 1024 * 1024


@dataclass
class Report:
    date: str
    sections: list[Section]
    html_path: Path | None = None
    json_path: Path | None = None
    pngs: list[Path] = field(default_factory=list)
    points: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def headline(self) -> dict:
        out: dict = {}
        for s in self.sections:
            out.update(s.headline)
        return out


def build_sections(data_dir: Path, date: str, instance=None) -> list[Section]:
    """Every section, in order. Charts are made with altair's debug mode off: it validates each
    object against the Vega-Lite schema as it is made, most of what a chart costs to build; one
    test validates every chart the report builds instead (tests/test_report.py)."""
    reader = Reader.open(data_dir)
    try:
        history = run_history(data_dir, date, instance=instance)
        ctx = Ctx(reader=reader, data_dir=data_dir, date=date, history=history)
        sections = []
        with debug_mode(False):
            for module in SECTIONS:
                if reader.con is None:
                    s = Section(module.__name__.rsplit(".", 1)[1], module.TITLE)
                    s.not_available(f"no warehouse at {data_dir} (run `wattline run --date {date}` first)")
                    sections.append(s)
                    continue
                try:
                    sections.append(module.build(ctx))
                except Exception as exc:  # one broken section must not take the report down
                    # Debug only: the section carries the error (the CLI prints one line for it and
                    # exits non-zero) and the HTML the traceback; no traceback per section on stderr.
                    log.debug("report section %s failed", module.__name__, exc_info=True)
                    s = Section(module.__name__.rsplit(".", 1)[1], module.TITLE, error=f"{type(exc).__name__}: {exc}")
                    s.add(Note(f"This section could not be built: {type(exc).__name__}: {exc}", "warn"))
                    s.add(Code("traceback", traceback.format_exc(limit=3)))
                    sections.append(s)
        return sections
    finally:
        reader.close()


def write_report(data_dir: Path, date: str, out_dir: Path, *, png: bool, instance=None) -> Path:
    """Write ``out_dir/D.html``, ``out_dir/D.json`` and ``out_dir/D/<chart>.png``; returns the HTML path."""
    return build_report(data_dir, date, out_dir, instance=instance, png=png).html_path


def build_report(data_dir: Path, date: str, out_dir: Path, *, png: bool, instance=None) -> Report:
    """The report of ``date`` in ``out_dir``, with a PNG per chart when ``png``: both values the
    caller resolved from the run's settings (pipeline.resources.reports_dir), never read here."""
    started = time.monotonic()
    data_dir = Path(data_dir).resolve()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = Report(date, build_sections(data_dir, date, instance))
    specs: dict[str, dict] = {}
    for s in report.sections:
        for c in s.charts:
            spec = charts.plain_titles(c.chart.to_dict(validate=False))  # validated by a test, not per run
            if "datasets" in spec:  # charts.inline's tuples as lists
                spec["datasets"] = {name: list(rows) for name, rows in spec["datasets"].items()}
            specs[c.name] = spec
            report.points[c.name] = charts.count_points(spec)
            if report.points[c.name] > charts.MAX_POINTS:
                log.warning("chart %s embeds %d points (budget %d)", c.name, report.points[c.name], charts.MAX_POINTS)
    page = render_html(report, specs, data_dir, out_dir)
    report.html_path = _write_atomic(out_dir / f"{date}.html", page.encode())
    if png:
        report.pngs = write_pngs(specs, out_dir / date)
    report.seconds = time.monotonic() - started
    summary = {
        "date": date,
        "data_dir": str(data_dir),
        "headline": report.headline,
        "sections": {
            s.key: {"title": s.title, "complete": not s.missing and s.error is None, "not_available": s.missing, "error": s.error}
            for s in report.sections
        },
        "charts": {name: {"points": n, "png": f"{date}/{name}.png" if report.pngs else None} for name, n in report.points.items()},
        "html_bytes": len(page.encode()),
    }
    report.json_path = _write_atomic(out_dir / f"{date}.json", (json.dumps(summary, indent=2, default=str) + "\n").encode())
    return report


def write_pngs(specs: dict[str, dict], folder: Path) -> list[Path]:
    import vl_convert as vlc
    from altair.utils._importers import vl_version_for_vl_convert

    folder.mkdir(parents=True, exist_ok=True)
    version = vl_version_for_vl_convert()
    paths = []
    for name, spec in specs.items():
        paths.append(_write_atomic(folder / f"{name}.png", vlc.vegalite_to_png(spec, vl_version=version, scale=1.5)))
    wanted = {f"{name}.png" for name in specs}
    for stale in folder.glob("*.png"):
        if stale.name not in wanted:
            stale.unlink()
    return paths


def _write_atomic(path: Path, data: bytes) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


# --- HTML ------------------------------------------------------------------------------------

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; margin: 0; background: #fafafa; }
header { background: #1f2d3d; color: #fff; padding: 14px 28px; }
header h1 { margin: 0; font-size: 20px; }
header p { margin: 4px 0 0; color: #c9d3dd; font-size: 12px; }
nav { padding: 8px 28px; background: #eef1f4; font-size: 13px; position: sticky; top: 0; z-index: 2; }
nav a { margin-right: 14px; color: #1f4e79; text-decoration: none; }
main { padding: 8px 28px 40px; max-width: 1860px; }
section { background: #fff; border: 1px solid #e1e4e8; border-radius: 6px; padding: 12px 20px 16px; margin: 16px 0; }
h2 { font-size: 17px; margin: 4px 0 10px; }
.chart { margin: 10px 0 4px; min-height: 60px; }
.caption { color: #555; font-size: 12px; margin: 2px 0 12px; }
.tablewrap { max-width: 100%; }
table { border-collapse: collapse; margin: 8px 0 4px; font-size: 12.5px; max-width: 100%; }
th, td { border-bottom: 1px solid #e6e6e6; padding: 3px 7px; text-align: left; vertical-align: top; overflow-wrap: anywhere; }
th { font-size: 12px; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; background: #f3f5f7; padding: 0 3px; border-radius: 3px; }
th { background: #f3f5f7; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
td details pre { max-width: 640px; white-space: pre-wrap; overflow-wrap: anywhere; }
.note { padding: 6px 10px; border-radius: 4px; margin: 8px 0; font-size: 13px; }
.note.info { background: #eef6ff; }
.note.missing { background: #f5f5f5; color: #555; border-left: 3px solid #bbb; }
.note.warn { background: #fff4e5; border-left: 3px solid #e6a23c; }
details { margin: 3px 0; font-size: 12px; }
summary { cursor: pointer; color: #1f4e79; }
pre { background: #f6f8fa; padding: 6px 10px; overflow-x: auto; white-space: pre-wrap; font-size: 12px; }
.badge { display: inline-block; font-size: 11px; padding: 1px 6px; border-radius: 8px; background: #ddd; margin-left: 8px; vertical-align: middle; }
.badge.partial { background: #ffe8b3; }
footer { color: #888; font-size: 11px; padding: 0 28px 20px; }
"""


def text_html(text: str) -> str:
    """Escaped text whose `names` (table and column names in captions and notes) show as code,
    not as literal backticks."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _cell(value) -> str:
    if value is None:
        return '<td class="n">–</td>'
    if isinstance(value, bool):
        return f"<td>{'yes' if value else 'no'}</td>"
    if isinstance(value, Code):
        return f"<td><details><summary>{html.escape(value.label)}</summary><pre>{html.escape(value.sql)}</pre></details></td>"
    if isinstance(value, (int, float)):
        if isinstance(value, int):
            text = f"{value:,}" if abs(value) >= 10000 else str(value)
        elif float(value).is_integer():
            text = f"{int(value):,}"
        else:
            text = f"{value:,.6g}" if abs(value) < 1e6 else f"{value:,.0f}"
        return f'<td class="n">{html.escape(text)}</td>'
    return f"<td>{text_html(str(value))}</td>"


def _block(block) -> str:
    if isinstance(block, Chart):
        caption = f'<p class="caption">{text_html(block.caption)}</p>' if block.caption else ""
        return f'<div class="chart" id="chart-{block.name}" data-chart="{block.name}" role="img" aria-label="{html.escape(block.name)}"></div>{caption}'
    if isinstance(block, Table):
        head = "".join(f"<th>{text_html(c)}</th>" for c in block.columns)
        body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in block.rows)
        caption = f'<p class="caption">{text_html(block.caption)}</p>' if block.caption else ""
        return f'{caption}<div class="tablewrap"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
    if isinstance(block, Note):
        return f'<div class="note {block.kind}">{text_html(block.text)}</div>'
    if isinstance(block, Collapsed):
        inner = "".join(_block(b) for b in block.blocks)
        return f'<details class="collapsed"><summary>{text_html(block.summary)}</summary>{inner}</details>'
    if isinstance(block, Code):
        return f"<details><summary>SQL: {html.escape(block.label)}</summary><pre>{html.escape(block.sql)}</pre></details>"
    raise TypeError(block)


def _script_json(value) -> str:
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


BUNDLE_CACHE_DIR = ".cache"


def vega_bundle(out_dir: Path | None = None) -> str:
    """Vega, Vega-Lite and vega-embed as one script for the page to inline (vl-convert's bundle,
    ~0.9 MB). vl-convert builds it in ~1.7 s of CPU once per process; kept in
    ``out_dir/.cache/`` under the versions that make it, a later process reads it instead."""
    import vl_convert as vlc
    from altair.utils._importers import vl_version_for_vl_convert

    vl_version = vl_version_for_vl_convert()
    if out_dir is None:
        return vlc.javascript_bundle(vl_version=vl_version)
    folder = out_dir / BUNDLE_CACHE_DIR
    path = folder / f"vega-bundle-vl-convert-{vlc.__version__}-{vl_version}.js"
    try:
        if kept := path.read_text(encoding="utf-8"):
            return kept
    except (OSError, UnicodeDecodeError):
        pass
    bundle = vlc.javascript_bundle(vl_version=vl_version)
    tmp: Path | None = None
    try:
        folder.mkdir(exist_ok=True)
        tmp = folder / f".vega-bundle-{os.getpid()}-{uuid.uuid4().hex}.tmp"  # its own name: two reports at once each rename a whole file
        tmp.write_text(bundle, encoding="utf-8")
        os.replace(tmp, path)
        tmp = None
        for other in folder.glob("vega-bundle-*.js"):  # bundles of other versions
            if other != path:
                other.unlink(missing_ok=True)
    except OSError:
        log.debug("could not keep the JavaScript bundle in %s", folder, exc_info=True)  # a cache only
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    return bundle


def render_html(report: Report, specs: dict[str, dict], data_dir: Path, out_dir: Path | None = None) -> str:
    bundle = vega_bundle(out_dir)
    nav = "".join(f'<a href="#{s.key}">{i}. {html.escape(s.title)}</a>' for i, s in enumerate(report.sections, 1))
    parts = []
    for i, s in enumerate(report.sections, 1):
        badge = '<span class="badge partial">partial</span>' if s.missing or s.error else ""
        head = f'<section id="{s.key}" data-section="{s.key}"><h2>{i}. {html.escape(s.title)}{badge}</h2>'
        parts.append(head + "".join(_block(b) for b in s.blocks) + "</section>")
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>wattline daily report {report.date}</title>
<style>{CSS}</style>
<script>
{bundle}
</script>
</head>
<body>
<header><h1>wattline daily report: {report.date} (UTC)</h1>
<p>Data dir {html.escape(str(data_dir))} · generated {generated} ·
numbers from the warehouse tables named in each caption (query them with <code>wattline sql</code>)</p></header>
<nav>{nav}</nav>
<main>
{''.join(parts)}
</main>
<footer>wattline · charts: Vega-Lite, rendered in the page (no network needed)</footer>
<script>
const SPECS = {_script_json(specs)};
const pending = Object.entries(SPECS).map(([name, spec]) =>
  vegaEmbed("#chart-" + name, spec, {{renderer: "svg", actions: {{export: true, source: false, compiled: false, editor: false}}}})
    .then(() => document.getElementById("chart-" + name).setAttribute("data-rendered", "1"))
    .catch((err) => console.error("chart " + name + ": " + err)));
Promise.all(pending).then(() => document.body.setAttribute("data-charts-rendered", String(pending.length)));
</script>
</body>
</html>
"""
