"""What ``zvf.validate`` returns: a list of issues, each naming the key it is about.

Pure data (no I/O), so reports can be built, merged and serialised anywhere.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ERROR", "LEVEL_NAMES", "WARNING", "Issue", "Report"]

ERROR = "error"
WARNING = "warning"

#: What each validation level covers (the spec's chapter 13 levels).
LEVEL_NAMES = {
    1: "structure",
    2: "metadata",
    3: "consistency",
    4: "conventions",
    5: "multi-resolution",
}


@dataclass(frozen=True)
class Issue:
    """One finding.  ``message`` starts with ``key`` so it reads on its own."""

    severity: str  # "error" | "warning"
    level: int  # 1..5, the check family that found it
    key: str  # store key (or node path) the issue is about
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "level": self.level, "key": self.key, "message": self.message}

    def __str__(self) -> str:
        return f"{self.severity.upper():7s} L{self.level} {self.message}"


@dataclass
class Report:
    """Outcome of validating one store at ``level`` (1..5).

    ``ok`` is true when no error was found (warnings do not fail a store).
    ``checked`` counts what was looked at (documents, cells, rows, links...),
    so an "ok" over an empty walk is visible as such.
    """

    target: str
    level: int
    issues: list[Issue] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(i.severity == ERROR for i in self.issues)

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == ERROR]

    @property
    def warnings(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == WARNING]

    def keys(self, severity: str | None = None) -> set[str]:
        """Keys named by the issues (optionally only errors or warnings)."""
        return {i.key for i in self.issues if severity is None or i.severity == severity}

    def find(self, text: str, severity: str | None = None) -> list[Issue]:
        """Issues whose key or message contains ``text``."""
        return [
            i for i in self.issues
            if (severity is None or i.severity == severity) and (text in i.key or text in i.message)
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "level": self.level,
            "ok": self.ok,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "checked": dict(self.checked),
            "issues": [i.to_dict() for i in self.issues],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def summary(self) -> str:
        status = "OK" if self.ok else "FAILED"
        names = ", ".join(LEVEL_NAMES[k] for k in range(1, self.level + 1))
        head = (
            f"{self.target}: {status} at level {self.level} ({names}): "
            f"{len(self.errors)} errors, {len(self.warnings)} warnings"
        )
        counts = ", ".join(f"{k}={v}" for k, v in sorted(self.checked.items()))
        lines = [head]
        if counts:
            lines.append(f"  checked: {counts}")
        lines.extend(f"  {i}" for i in sorted(self.issues, key=lambda i: (i.severity != ERROR, i.level)))
        return "\n".join(lines)

    __str__ = summary

    def __repr__(self) -> str:
        return (
            f"Report({self.target!r}, level={self.level}, ok={self.ok}, errors={len(self.errors)}, "
            f"warnings={len(self.warnings)})"
        )
