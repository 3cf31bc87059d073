"""The systemd unit: INI structure, hardening keys and `systemd-analyze verify`."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from .common import GRACE_PERIOD_KEY, WORKER_ENV_KEYS, Report, parse_duration_seconds, read_env_file

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
