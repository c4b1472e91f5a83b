"""A made-up Go world for the look-alike, with what each module's rows must say written out
beside it (by construction, not by stagecrawl's code): a 160-version module with a path that
needs case-encoding, a retraction interval in its latest go.mod and one in an older go.mod that
must not count, `Deprecated:` against `deprecated:`, +incompatible with and without a go.mod,
pseudo-versions only in the feed, a 404 and a 410 module."""

from __future__ import annotations

from dataclasses import dataclass, field

from stagecrawl.testing.go_origin import GoOrigin

BIG = "example.com/Big/Mod"
LOWER = "example.com/lower"
LEGACY = "example.com/legacy"  # v1 has a go.mod: v2+incompatible is never latest
OLDSTYLE = "example.com/oldstyle"  # no go.mod anywhere: +incompatible may be latest
UNTAGGED = "example.com/untagged"  # pseudo-versions only, in the feed only
GONE, REMOVED = "example.com/gone", "example.com/removed"
NAMED = [BIG, LOWER, LEGACY, OLDSTYLE, GONE, REMOVED]
BIG_PSEUDO = "v1.159.1-0.20240301000000-abcdefabcdef"


@dataclass
class Expected:
    versions: dict[str, list[dict[str, object]]] = field(default_factory=dict)  # requires
    retracted: dict[str, dict[str, str]] = field(default_factory=dict)  # version -> rationale
    latest: dict[str, str] = field(default_factory=dict)
    deprecated: dict[str, str | None] = field(default_factory=dict)
    pseudo: dict[str, set[str]] = field(default_factory=dict)
    feed_only: dict[str, set[str]] = field(default_factory=dict)


def build(origin: GoOrigin) -> Expected:
    want = Expected()
    big = [f"v1.{i}.0" for i in range(160)] + ["v1.160.0-rc.1"]
    want.versions[BIG] = []
    for i, version in enumerate(big):
        requires = [{"path": "example.com/dep", "version": f"v1.{i % 5}.0", "indirect": False}]
        lines = f"require example.com/dep v1.{i % 5}.0\n"
        if i % 7 == 0:
            requires.append({"path": "example.com/Ind", "version": "v0.1.0", "indirect": True})
            lines += "require example.com/Ind v0.1.0 // indirect\n"
        head = f"module {BIG}\n\ngo 1.21\n\n"
        if version == "v1.100.0":  # an older go.mod's retraction: never read
            lines += "retract v1.3.0 // not from the latest go.mod\n"
        if version == "v1.159.0":
            head = f"// Big is made up.\n//\n// Deprecated: use example.com/new\nmodule {BIG}\n\ngo 1.21\n\n"  # noqa: E501
            lines += "retract (\n\t[v1.10.0, v1.19.0] // broken range\n\tv1.159.0 // itself\n)\n"
        origin.publish(BIG, version, head + lines)
        want.versions[BIG].append({"version": version, "requires": requires})
    origin.publish(BIG, BIG_PSEUDO, f"module {BIG}\n\ngo 1.22\n")
    want.versions[BIG].append({"version": BIG_PSEUDO, "requires": []})
    want.retracted[BIG] = {f"v1.{i}.0": "broken range" for i in range(10, 20)}
    want.retracted[BIG]["v1.159.0"] = "itself"
    want.latest[BIG] = "v1.158.0"  # the highest release not retracted, above the rc
    want.deprecated[BIG] = "use example.com/new"
    want.pseudo[BIG] = {BIG_PSEUDO}
    want.feed_only[BIG] = {BIG_PSEUDO}

    for version in ("v0.1.0", "v0.2.0"):
        head = "// deprecated: lower case does not deprecate\n"
        origin.publish(LOWER, version, head + f"module {LOWER}\n\ngo 1.20\n")
    want.versions[LOWER] = [{"version": v, "requires": []} for v in ("v0.1.0", "v0.2.0")]
    want.latest[LOWER], want.deprecated[LOWER] = "v0.2.0", None

    origin.publish(LEGACY, "v1.0.0", f"module {LEGACY}\n\ngo 1.18\n")
    origin.publish(LEGACY, "v2.0.0+incompatible", f"module {LEGACY}\n")
    want.versions[LEGACY] = [
        {"version": v, "requires": []} for v in ("v1.0.0", "v2.0.0+incompatible")
    ]
    want.latest[LEGACY], want.deprecated[LEGACY] = "v1.0.0", None

    origin.publish(OLDSTYLE, "v1.0.0", f"module {OLDSTYLE}\n")
    origin.publish(OLDSTYLE, "v2.1.0+incompatible", f"module {OLDSTYLE}\n")
    want.versions[OLDSTYLE] = [
        {"version": v, "requires": []} for v in ("v1.0.0", "v2.1.0+incompatible")
    ]
    want.latest[OLDSTYLE], want.deprecated[OLDSTYLE] = "v2.1.0+incompatible", None

    untagged = ["v0.0.0-20240101000000-aaaaaaaaaaaa", "v0.0.0-20240201000000-bbbbbbbbbbbb"]
    for version in untagged:
        origin.publish(UNTAGGED, version, f"module {UNTAGGED}\n\ngo 1.22\n")
    want.versions[UNTAGGED] = [{"version": v, "requires": []} for v in untagged]
    want.latest[UNTAGGED], want.deprecated[UNTAGGED] = untagged[-1], None
    want.pseudo[UNTAGGED] = want.feed_only[UNTAGGED] = set(untagged)

    origin.module(GONE).gone = 404
    origin.module(REMOVED).gone = 410
    return want


def urls(origin: GoOrigin, proxy_rate: float = 40, index_rate: float = 5) -> list[str]:
    return [
        *("--proxy-url", origin.proxy_url, "--index-url", origin.index_url),
        *("--proxy-rate", str(proxy_rate), "--index-rate", str(index_rate)),
        *("--contact", "tests@example.org"),
    ]
