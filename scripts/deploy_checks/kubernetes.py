"""Kubernetes manifests: schemas per kind, then facts that must agree across files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

try:
    import kubernetes_validate
except ImportError:
    kubernetes_validate = None

from .common import CREDENTIALS_MOUNT, GRACE_PERIOD_KEY, METRICS_PORT, WORKER_ENV_KEYS, Report, schema_errors

KUBERNETES_VERSION = "1.30.0"
BACKLOG_QUERY = "SELECT COALESCE(sum(backlog_tokens), 0) FROM push.queue_backlog"

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
