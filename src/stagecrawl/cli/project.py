"""The commands across registries: `stagecrawl audit [DIR]` and `stagecrawl licenses check
[DIR]` (every lock file under DIR, each with its registry, one report), `stagecrawl
licenses import FILE` (the license reference every registry uses) and `stagecrawl upgrade`
(a database an older stagecrawl made, brought to this one's schema)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stagecrawl.cli.common import (
    CacheDir,
    Db,
    console,
    finish,
    guarded,
    run,
    settings_from,
)
from stagecrawl.cli.registry import AUDIT_FORMATS, SUMMARY_FORMATS
from stagecrawl.cli.sca_render import OutputOption, check_format, check_output, deliver

if TYPE_CHECKING:
    from stagecrawl.engine.shutdown import GracefulStop
    from stagecrawl.kernel.project import ProjectAudit, ProjectLicenses

Folder = Annotated[
    Path,
    typer.Argument(help="The project folder (or one lock file) to search.", metavar="[DIR]"),
]
Config = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="Gate config: stagecrawl.toml (the Rust parts also read deny.toml and"
        " .cargo/audit.toml) [default: stagecrawl.toml upward from here]",
        metavar="FILE",
    ),
]


def _registries() -> list[Any]:
    from stagecrawl.registries import declare_tables, load_all

    declare_tables()
    return load_all()


def audit(
    folder: Folder = Path("."),
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="table, json, sarif, cyclonedx or markdown (to stdout or --output).",
            metavar="[table|json|sarif|cyclonedx|markdown]",
        ),
    ] = "table",
    output: OutputOption = None,
    config: Config = None,
    deny: Annotated[
        list[str] | None,
        typer.Option(
            "--deny",
            metavar="KIND",
            help="Fail on"
            " informational findings too (warnings, unmaintained, unsound, notice,"
            " yanked).",
        ),
    ] = None,
    ignore: Annotated[
        list[str] | None,
        typer.Option("--ignore", metavar="ID", help="An advisory id (or alias) not to fail on."),
    ] = None,
    severity_threshold: Annotated[
        str | None,
        typer.Option("--severity-threshold", metavar="LEVEL", help="Set aside hits rated below."),
    ] = None,
    max_advisory_age: Annotated[
        str | None,
        typer.Option("--max-advisory-age", metavar="DAYS", help="Fail on older advisory data."),
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="Fail when any input could not be audited.")
    ] = False,
    desc: Annotated[bool, typer.Option("--desc", help="Show each advisory's details.")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No report when all is well.")
    ] = False,
    cache_dir: CacheDir = None,
    db: Db = None,
) -> None:
    """Every lock file under DIR (Cargo.lock, requirements*.txt/.in, poetry.lock, uv.lock,
    pylock*.toml, go.mod, go.work), each against its registry's stored advisories, through
    one gate: one report, exit 1 when any finding fails it (docs/sca.md)."""
    options = locals()
    s = guarded(lambda: settings_from(options))

    async def body(stop: GracefulStop) -> int:
        from stagecrawl.kernel.project import audit_project
        from stagecrawl.kernel.sca import AuditRequest, Inputs

        check_format(fmt, AUDIT_FORMATS)
        check_output(output)
        request = AuditRequest(
            Inputs(), tuple(deny or ()), tuple(ignore or ()), severity_threshold,
            max_advisory_age, strict,
        )  # fmt: skip
        result = await audit_project(_registries(), s, folder, request, stop, config)
        for _registry, report in result.parts:
            for note in dict.fromkeys(report.notes):
                console.print(f"note: {note}", highlight=False, markup=False, soft_wrap=True)
        deliver(project_audit_text(result, fmt, desc), output, result.exit_code)
        return result.exit_code

    run(body, s.grace_period)


def project_audit_text(result: ProjectAudit, fmt: str, desc: bool) -> str:
    from stagecrawl.cli.render import audit_text, json_text
    from stagecrawl.sca.cyclonedx import audit_cyclonedx
    from stagecrawl.sca.ecosystem import utcnow
    from stagecrawl.sca.report_json import audit_json
    from stagecrawl.sca.sarif import audit_sarif

    parts = result.parts
    if fmt == "json":
        return json_text(
            {
                "ecosystems": {r.ecosystem.name: audit_json(report) for r, report in parts},
                "not_audited": result.failed,
                "vulnerabilities": sum(len(report.vulnerabilities) for _r, report in parts),
                "exit_code": result.exit_code,
            }
        )
    if fmt == "sarif":
        logs = [audit_sarif(report) for _r, report in parts]
        log: dict[str, Any] = logs[0] if logs else {"version": "2.1.0", "runs": []}
        log["runs"] = [run_ for each in logs for run_ in each["runs"]]
        return json_text(log)
    if fmt == "cyclonedx":
        now, serial = utcnow(), str(uuid.uuid4())
        boms = [audit_cyclonedx(report, serial, now) for _r, report in parts]
        bom: dict[str, Any] = boms[0]
        for key in ("components", "vulnerabilities", "dependencies"):
            entries = [entry for each in boms for entry in each.get(key, [])]
            if entries:
                bom[key] = entries
        bom["metadata"].pop("component", None)  # several projects: no one root
        return json_text(bom)
    texts = []
    for registry, report in parts:
        text = audit_text(report, fmt, None, desc)
        heading = f"{registry.decl.title}"
        texts.append(f"# {heading}\n\n{text}" if fmt == "markdown" else f"== {heading} ==\n{text}")
    texts += [f"not audited: {title}: {why}\n" for title, why in result.failed.items()]
    return "\n".join(texts)


def licenses_check(
    folder: Folder = Path("."),
    allow: Annotated[
        list[str] | None, typer.Option("--allow", metavar="IDS", help="Allowed SPDX ids.")
    ] = None,
    deny: Annotated[
        list[str] | None, typer.Option("--deny", metavar="IDS", help="Denied SPDX ids.")
    ] = None,
    exception: Annotated[
        list[str] | None,
        typer.Option("--exception", metavar="RULE", help="NAME=LICENSE: for that one only."),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="table, json or markdown (to stdout or --output).",
            metavar="[table|json|markdown]",
        ),
    ] = "table",
    output: OutputOption = None,
    config: Config = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No report when all is well.")
    ] = False,
    cache_dir: CacheDir = None,
    db: Db = None,
) -> None:
    """The licenses of every lock file's versions under DIR against one policy (cargo-deny's
    semantics); exit 1 when any is not accepted or not collected. Read-only."""
    options = locals()
    s = guarded(lambda: settings_from(options))

    async def body(stop: GracefulStop) -> int:
        from stagecrawl.kernel.project import check_project_licenses

        check_format(fmt, SUMMARY_FORMATS)
        check_output(output)
        result = await check_project_licenses(
            _registries(), s, folder, allow or [], deny or [], exception or [], stop, config
        )
        deliver(project_license_text(result, fmt), output, result.exit_code)
        return result.exit_code

    run(body, s.grace_period)


def project_license_text(result: ProjectLicenses, fmt: str) -> str:
    from stagecrawl.cli.render import json_text, license_text

    if fmt == "json":
        import json

        return json_text(
            {
                "ecosystems": {
                    r.ecosystem.name: json.loads(license_text(r.decl, check, "json"))
                    for r, check in result.parts
                },
                "exit_code": result.exit_code,
            }
        )
    return "\n".join(
        f"== {r.decl.title} ==\n{license_text(r.decl, check, fmt)}" for r, check in result.parts
    )


def licenses_import(
    file: Annotated[Path, typer.Argument(help="CSV or JSON: ID, NAME_SHORT, NAME, MAPPING, URL.")],
    db: Db = None,
) -> None:
    """Load a license reference into TB_LICENSE_V2 (upsert by ID)."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    from stagecrawl.components import open_database
    from stagecrawl.registries import declare_tables
    from stagecrawl.sca.reference import import_reference

    def body() -> int:
        declare_tables()
        count = import_reference(open_database(s), file)
        console.print(f"imported {count} license rows")
        return 0

    raise typer.Exit(guarded(body))


def upgrade(db: Db = None) -> None:
    """Bring a database an older stagecrawl made to this one's schema, in place (data kept).
    Every writing command does the same on its way; this one does only that."""
    options = locals()
    s = guarded(lambda: settings_from(options))

    def body() -> int:
        from stagecrawl.components import open_database
        from stagecrawl.registries import declare_tables

        declare_tables()
        database = open_database(s)  # migrations run as it opens
        console.print(f"{database.safe_url} is at this stagecrawl's schema", highlight=False)
        return 0

    raise finish(guarded(body))


licenses_app = typer.Typer(
    help="License reference and policy across registries.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
licenses_app.command("check")(licenses_check)
licenses_app.command("import")(licenses_import)

__all__ = ["audit", "licenses_app", "upgrade"]
