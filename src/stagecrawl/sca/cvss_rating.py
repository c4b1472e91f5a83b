"""CVSS vectors as scores and levels (the `cvss` library: v2, v3.x, v4)."""

from __future__ import annotations

from cvss import CVSS2, CVSS3, CVSS4
from cvss.exceptions import CVSSError


def cvss_rating(vector: str | None) -> tuple[float, str, str] | None:
    """(base score, severity in lower case, CycloneDX method) of a CVSS vector, or None."""
    if not vector:
        return None
    try:
        if vector.startswith("CVSS:4."):
            v4 = CVSS4(vector)
            return float(v4.base_score), str(v4.severity).lower(), "CVSSv4"
        if vector.startswith("CVSS:3."):
            v3 = CVSS3(vector)
            method = "CVSSv31" if vector.startswith("CVSS:3.1") else "CVSSv3"
            return float(v3.base_score), str(v3.severities()[0]).lower(), method
        v2 = CVSS2(vector)
        return float(v2.base_score), str(v2.severities()[0]).lower(), "CVSSv2"
    except (CVSSError, ValueError, KeyError):
        return None
