"""Prometheus alert rules and the Grafana dashboard: structure, PromQL syntax, metric names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

try:
    import promql_parser
except ImportError:
    promql_parser = None

from .common import COUNTERS_AND_GAUGES, HISTOGRAMS, KNOWN_METRICS, Report


def promql_metric_names(expr: str) -> list[str]:
    """Returns metric names referenced by `expr`; raises ValueError on bad syntax."""
    # Grafana variables are not PromQL; give them values the parser accepts.
    concrete = re.sub(r"\$__(rate_)?interval|\$__range", "5m", expr)
    concrete = re.sub(r"\$\{?[A-Za-z_]\w*\}?", "x", concrete)
    if promql_parser is not None:
        names: list[str] = []

        def visit(node: Any) -> None:
            if isinstance(node, promql_parser.VectorSelector):
                names.append(node.name or "")

        promql_parser.walk(promql_parser.parse(concrete), visit)
        return names
    stripped = re.sub(r'"(?:[^"\\]|\\.)*"', '""', concrete)
    depth: list[str] = []
    for char in stripped:
        if char in "([{":
            depth.append(char)
        elif char in ")]}":
            if not depth or "([{"[")]}".index(char)] != depth.pop():
                raise ValueError(f"unbalanced {char!r}")
    if depth:
        raise ValueError(f"unclosed {depth[-1]!r}")
    return re.findall(r"\b(pgpush_\w+|up)\b(?!\s*\()", re.sub(r"\{[^}]*\}", "", stripped))


def check_expression(expr: Any, label: str, report: Report) -> set[str]:
    if not isinstance(expr, str) or not expr.strip():
        report.fail(label, "empty expression")
        return set()
    try:
        names = promql_metric_names(expr)
    except ValueError as error:
        report.fail(label, f"PromQL does not parse: {error}")
        return set()
    unknown = sorted(set(n for n in names if n not in KNOWN_METRICS))
    ok = bool(names) and not unknown
    report.check(ok, label, f"unknown metrics {unknown}" if unknown else "names no pgpush_ metric or `up`")
    return set(names)


def validate_alerts(documents: dict[Path, list[Any]], deploy: Path, report: Report) -> None:
    print("prometheus rules" + ("" if promql_parser else " (bracket check only)"))
    if promql_parser is None:
        report.missing_tool("promql-parser", "pip install promql-parser", "full PromQL parsing")
    path = deploy / "prometheus" / "alerts.yaml"
    if not report.check(path in documents, "prometheus/alerts.yaml parsed"):
        return
    doc = documents[path][0]
    groups = doc.get("groups") if isinstance(doc, dict) else None
    if not report.check(isinstance(groups, list) and bool(groups), "rule file has groups"):
        return
    used: set[str] = set()
    alerts: set[str] = set()
    for group in groups:
        if not report.check(isinstance(group, dict) and group.get("name") and isinstance(group.get("rules"), list)
                            and group["rules"], f"group {group.get('name') if isinstance(group, dict) else group}",
                            "needs name and non-empty rules"):
            continue
        for rule in group["rules"]:
            name = rule.get("alert") if isinstance(rule, dict) else None
            if not report.check(bool(name) and "expr" in rule, f"rule {name} has alert and expr"):
                continue
            extra = sorted(set(rule) - {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"})
            report.check(not extra, f"rule {name} fields", f"unknown {extra}")
            if "for" in rule:
                report.check(bool(re.fullmatch(r"(\d+(ms|s|m|h|d|w|y))+", str(rule["for"]))),
                             f"rule {name} `for` is a duration", str(rule["for"]))
            report.check("severity" in rule.get("labels", {}), f"rule {name} has a severity label")
            alerts.add(name)
            used |= check_expression(rule["expr"], f"rule {name} expr", report)
    for metric in ("pgpush_oldest_job_age_seconds", "pgpush_sends_total", "pgpush_paused_apps",
                   "pgpush_goaways_total", "pgpush_bad_device_token_valve_trips_total", "up"):
        report.check(metric in used, f"an alert watches {metric}")


# ---------------------------------------------------------------- Grafana


def validate_dashboard(documents: dict[Path, list[Any]], deploy: Path, report: Report) -> None:
    print("grafana dashboard")
    path = deploy / "grafana" / "pgpush-dashboard.json"
    if not report.check(path in documents, "grafana/pgpush-dashboard.json parsed"):
        return
    dash = documents[path][0]
    report.check(isinstance(dash.get("schemaVersion"), int) and dash["schemaVersion"] >= 36,
                 "schemaVersion is a modern Grafana schema", str(dash.get("schemaVersion")))
    report.check(any(i.get("name") == "DS_PROMETHEUS" and i.get("pluginId") == "prometheus"
                     for i in dash.get("__inputs", [])), "DS_PROMETHEUS datasource input declared")
    report.check(bool(dash.get("title")) and bool(dash.get("uid")), "title and uid set")
    panels = [p for p in dash.get("panels", []) if p.get("type") != "row"]
    for row in (p for p in dash.get("panels", []) if p.get("type") == "row"):
        panels += row.get("panels", [])
    if not report.check(len(panels) >= 10, "at least 10 panels", f"{len(panels)}"):
        return
    used: set[str] = set()
    ids = [p.get("id") for p in dash.get("panels", [])]
    report.check(len(ids) == len(set(ids)), "panel ids are unique")
    for panel in panels:
        title = panel.get("title", f"id {panel.get('id')}")
        grid = panel.get("gridPos", {})
        report.check(all(isinstance(grid.get(k), int) for k in "hwxy"), f"panel {title!r} has gridPos")
        report.check(panel.get("datasource", {}).get("uid") == "${DS_PROMETHEUS}",
                     f"panel {title!r} uses ${{DS_PROMETHEUS}}")
        targets = panel.get("targets", [])
        if not report.check(bool(targets), f"panel {title!r} has targets"):
            continue
        for target in targets:
            used |= check_expression(target.get("expr"), f"panel {title!r} target {target.get('refId')}", report)
    missing = sorted(m for m in COUNTERS_AND_GAUGES | {h + "_bucket" for h in HISTOGRAMS} if m not in used)
    report.check(not missing, "dashboard shows every exported metric", f"missing {missing}")
