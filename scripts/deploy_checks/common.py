"""What every check shares: the result report, the worker's settings and metric names,
and YAML/JSON loading."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

GRACE_PERIOD_KEY = "PGPUSH_GRACE_PERIOD"
METRICS_PORT = 9464
CREDENTIALS_MOUNT = "/etc/pgpush/credentials"

# Metrics the worker exports; histograms also expose _bucket/_sum/_count.
COUNTERS_AND_GAUGES = {
    "pgpush_sends_total", "pgpush_inflight_streams", "pgpush_connections",
    "pgpush_goaways_total", "pgpush_reconnects_total", "pgpush_retries_total",
    "pgpush_queue_backlog_tokens", "pgpush_oldest_job_age_seconds",
    "pgpush_paused_apps", "pgpush_pruned_total",
    "pgpush_bad_device_token_valve_trips_total",
}
HISTOGRAMS = {"pgpush_send_duration_seconds", "pgpush_claim_duration_seconds"}
KNOWN_METRICS = COUNTERS_AND_GAUGES | {
    h + suffix for h in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")
} | {"up"}

WORKER_ENV_KEYS = {
    "DATABASE_URL", "PGPUSH_APNS_ENDPOINT", "PGPUSH_APNS_CA_FILE", "PGPUSH_CREDENTIALS_DIR",
    "PGPUSH_CONNECTIONS_PER_APP", "PGPUSH_CHUNK_SIZE", GRACE_PERIOD_KEY,
    "PGPUSH_METRICS_HOST", "PGPUSH_METRICS_PORT", "PGPUSH_LOG_FORMAT", "PGPUSH_LOG_LEVEL",
}


class Report:
    """Collects pass/fail results and optional-tool notices."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.passed = 0
        self.failures: list[str] = []

    def check(self, ok: bool, what: str, detail: str = "") -> bool:
        if ok:
            self.passed += 1
            print(f"  ok    {what}")
        else:
            message = f"{what}: {detail}" if detail else what
            self.failures.append(message)
            print(f"  FAIL  {message}")
        return ok

    def fail(self, what: str, detail: str) -> None:
        self.check(False, what, detail)

    def missing_tool(self, tool: str, install_hint: str, skipped: str) -> None:
        if self.strict:
            self.fail(f"{tool} not available", f"{install_hint} (required by --strict)")
        else:
            print(f"  NOTE  {tool} not available ({install_hint}); skipped {skipped}")


def schema_errors(schema: dict[str, Any], document: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in sorted(validator.iter_errors(document), key=lambda e: list(map(str, e.path)))]


# ---------------------------------------------------------------- parsing


def load_all(deploy: Path, report: Report) -> dict[Path, list[Any]]:
    """Parses every YAML/JSON file; returns documents per file."""
    print("parse")
    documents: dict[Path, list[Any]] = {}
    for path in sorted(deploy.rglob("*")):
        if not path.is_file() or path.suffix not in (".yaml", ".yml", ".json"):
            continue
        rel = path.relative_to(deploy)
        try:
            if path.suffix == ".json":
                docs = [json.loads(path.read_text())]
            else:
                docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        except (yaml.YAMLError, json.JSONDecodeError) as error:
            report.fail(f"parse {rel}", str(error).replace("\n", " "))
            continue
        if report.check(bool(docs), f"parse {rel}", "file holds no document"):
            documents[path] = docs
    return documents


def parse_duration_seconds(text: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", str(text))
    if not parts or "".join(n + u for n, u in parts) != str(text):
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


def read_env_file(path: Path) -> dict[str, str]:
    pairs = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs
