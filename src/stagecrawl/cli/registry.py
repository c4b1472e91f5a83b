"""One command group for every registry, built from its declaration: seed, collect, crawl,
refresh, lock, vulns, audit and licenses (check, backfill), with the shared options written
once and the registry's own settings (its lanes) as flags. A registry's CLI module adds only
what is its own (crates: dbdump, --pinned-only).

Each command's signature is assembled from option specs (`Param`): typer reads it like any
function's. `<registry> --help` must start at once: nothing here imports the registry's work
(clients, SQLAlchemy, the engine) until a command runs (`RegistryDecl.load`).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stagecrawl.cli.common import (
    EXIT_OK,
    EXIT_PARTIAL,
    AiLicenseUrl,
    AiRate,
    CacheDir,
    Concurrency,
    Contact,
    Db,
    Format,
    FormatOption,
    GracePeriod,
    LeaseSeconds,
    Quiet,
    RedisUrl,
    exit_code,
    guarded,
    progress,
    run,
    setting_option,
    settings_from,
)
from stagecrawl.cli.sca_render import OutputOption, check_format, check_output, deliver
from stagecrawl.errors import InputError
from stagecrawl.kernel.declaration import RegistryDecl
from stagecrawl.settings import BY_NAME

if TYPE_CHECKING:
    from stagecrawl.engine.shutdown import GracefulStop
    from stagecrawl.kernel.registry import Registry
    from stagecrawl.settings import Settings

Options = dict[str, Any]
AUDIT_FORMATS = ("table", "json", "sarif", "cyclonedx", "markdown")
SUMMARY_FORMATS = ("table", "json", "markdown")


@dataclass(frozen=True)
class Param:
    """One option or argument of a built command: its name (the callback's keyword), its
    typer annotation and its default."""

    name: str
    annotation: Any
    default: Any = None


def command(
    app: typer.Typer,
    name: str,
    params: Sequence[Param],
    body: Callable[[Options], None],
    doc: str,
) -> None:
    """Add a command whose signature is `params` and whose callback hands them to `body`."""

    def callback(**options: Any) -> None:
        body(options)

    callback.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                p.name, inspect.Parameter.KEYWORD_ONLY, default=p.default, annotation=p.annotation
            )
            for p in params
        ]
    )
    callback.__doc__ = doc
    callback.__name__ = name.replace("-", "_")
    app.command(name)(callback)


def section_params(decl: RegistryDecl, lanes: Sequence[str] | None = None) -> list[Param]:
    """The registry's own settings as flags (`--index-url`, `--api-rate` …), those with one;
    with `lanes`, every lane's URL (where the registry is: one set of URLs for every command)
    and the other knobs of these lanes only (`index_rate` … for "index"): a command offers no
    flag that paces a lane it does not use."""
    prefix = f"{decl.section.KEY}."
    return [
        Param(name, setting_option(row.name))
        for row in BY_NAME.values()
        if row.name.startswith(prefix) and row.flag
        for name in [row.name.removeprefix(prefix)]
        if lanes is None
        or name.endswith("_url")
        or name in decl.section.EVERY_COMMAND
        or name.startswith(tuple(f"{lane}_" for lane in lanes))
    ]


def _list(kind: Any, flag: str, help_text: str, metavar: str) -> Any:
    return Annotated[
        list[kind] | None,
        typer.Option(flag, help=help_text, metavar=metavar, show_default=False),
    ]


def shared(decl: RegistryDecl) -> dict[str, Param]:
    """The options every registry's commands draw from, in the registry's words."""
    w = decl.words
    return {
        "names": Param(
            "names",
            Annotated[
                list[str] | None,
                typer.Argument(
                    help=f"{w.unit.capitalize()} names.", show_default=False, metavar="NAME…"
                ),
            ],
        ),
        "seeds_file": Param(
            "seeds_file",
            Annotated[
                Path | None,
                typer.Option(
                    "--file", help="Seeds file: one name per line, # comments.", metavar="FILE"
                ),
            ],
        ),
        "resync": Param(
            "resync",
            Annotated[bool, typer.Option("--resync", help="Collect finished events again.")],
            False,
        ),
        "limit": Param(
            "limit",
            Annotated[
                int | None,
                typer.Option("--limit", min=1, help="Collect at most N events.", metavar="N"),
            ],
        ),
        "skip_existing": Param(
            "skip_existing",
            Annotated[
                bool,
                typer.Option(
                    "--skip-existing/--no-skip-existing",
                    help="Mark events already in VERSION as skipped (2) instead of fetching"
                    " them again.",
                ),
            ],
            True,
        ),
        "fmt": Param("fmt", FormatOption, Format.table),
        "quiet": Param("quiet", Quiet, False),
        "db": Param("db", Db),
        "contact": Param("contact", Contact),
        "concurrency": Param("concurrency", Concurrency),
        "redis_url": Param("redis_url", RedisUrl),
        "lease_seconds": Param("lease_seconds", LeaseSeconds),
        "grace_period": Param("grace_period", GracePeriod),
        "ai_license_url": Param("ai_license_url", AiLicenseUrl),
        "ai_rate": Param("ai_rate", AiRate),
        "cache_dir": Param("cache_dir", CacheDir),
        "targets": Param(
            "targets",
            Annotated[
                list[str] | None,
                typer.Argument(
                    help=f"{decl.pin_form} (or NAME: its collected versions).",
                    show_default=False,
                    metavar="PIN…",
                ),
            ],
        ),
        "lockfile": Param(
            "lockfile", _list(Path, "--lockfile", decl.lock_help or "A lock file.", "FILE")
        ),
        "repo": Param(
            "repo",
            Annotated[
                str | None,
                typer.Option(
                    "--repo", help="Git URL or path: its tags' lock files.", metavar="REPO"
                ),
            ],
        ),
        "tag": Param("tag", _list(str, "--tag", "A tag of the repository; repeatable.", "TAG")),
        "tags_matching": Param(
            "tags_matching",
            Annotated[
                str | None,
                typer.Option("--tags-matching", help="Glob over the tags.", metavar="GLOB"),
            ],
        ),
        "all_tags": Param(
            "all_tags", Annotated[bool, typer.Option("--all-tags", help="Every tag.")], False
        ),
        "output": Param("output", OutputOption),
        "config": Param(
            "config",
            Annotated[
                Path | None,
                typer.Option(
                    "--config",
                    help="Gate config: stagecrawl.toml"
                    + (", deny.toml or .cargo/audit.toml" if decl.cli == "crates" else "")
                    + " [default: stagecrawl.toml upward from here]",
                    metavar="FILE",
                ),
            ],
        ),
    }


def pick(decl: RegistryDecl, *names: str) -> list[Param]:
    table = shared(decl)
    return [table[n] for n in names]


NETWORK = ("db", "contact", "concurrency", "redis_url", "grace_period")
COLLECTING = (*NETWORK, "lease_seconds", "ai_license_url", "ai_rate")


def load(decl: RegistryDecl, s: Settings | None = None) -> Registry[Any]:
    """The registry's work (configured with the run's settings: names are checked against
    them), and every registry's tables declared (a command's database holds them all, as
    `status` shows)."""
    from stagecrawl.kernel.registry import load as load_registry
    from stagecrawl.registries import declare_tables

    declare_tables()
    registry = load_registry(decl)
    if s is not None:
        registry.configure(s)
    return registry


def settings(decl: RegistryDecl, options: Options) -> Settings:
    return guarded(lambda: settings_from(options, decl.section.KEY))


def gather_names(
    decl: RegistryDecl, registry: Registry[Any], names: list[str] | None, seeds_file: Path | None
) -> list[str]:
    """Names from the arguments, a seeds file (one a line, `#` comments: a bad line names the
    file and line, and nothing of the file is used) and the environment, each checked."""
    collected = [registry.validate_name(n.strip()) for n in names or []]
    if seeds_file is not None:
        try:
            text = seeds_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read seeds file {seeds_file}: {exc}") from None
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if line:
                try:
                    collected.append(registry.validate_name(line))
                except InputError as exc:
                    raise InputError(f"{seeds_file}:{number}: {exc}") from None
    env = os.environ.get(decl.seed_env, "") if decl.seed_env else ""
    collected += [registry.validate_name(n.strip()) for n in env.split(",") if n.strip()]
    if not collected:
        where = f"arguments, --file or {decl.seed_env}" if decl.seed_env else "arguments or --file"
        raise InputError(f"no {decl.words.unit} names given ({where})")
    return collected


# -- the commands ----------------------------------------------------------------------------


def add_collect_commands(app: typer.Typer, decl: RegistryDecl) -> None:
    w = decl.words
    own = section_params(decl)

    def crawl(options: Options, names: bool, collect: bool) -> None:
        s = settings(decl, options)
        registry = load(decl, s)
        fmt = options["fmt"]
        wanted = (
            guarded(lambda: gather_names(decl, registry, options["names"], options["seeds_file"]))
            if names
            else []
        )

        async def body(stop: GracefulStop) -> int:
            from stagecrawl.cli.render import render_collect
            from stagecrawl.kernel.phases import run_collect, run_seed

            resync = bool(options.get("resync"))
            if collect:
                with progress("collecting", fmt) as bar:
                    report = await run_collect(
                        registry, s, stop, wanted, resync, options.get("limit"),
                        options.get("skip_existing", True), bar,
                    )  # fmt: skip
            else:
                with progress("seeding", fmt) as bar:
                    report = await run_seed(registry, s, wanted, stop, resync, bar)
            render_collect(decl, report, fmt)
            return exit_code(report.problems, report.interrupted, stop)

        run(body, s.grace_period)

    seeding = pick(decl, "names", "seeds_file", "resync")
    collecting = pick(decl, "limit", "skip_existing")
    common = pick(decl, "fmt", "quiet")
    command(
        app,
        "seed",
        [*seeding, *common, *pick(decl, *NETWORK), *own],
        lambda o: crawl(o, names=True, collect=False),
        f"Register every version of each {w.unit} (from {w.index}) in the LIST table.",
    )
    command(
        app,
        "collect",
        [*collecting, *common, *pick(decl, *COLLECTING), *own],
        lambda o: crawl(o, names=False, collect=True),
        "Collect pending LIST events (and queued seeds) into VERSION and PRODUCT.",
    )
    command(
        app,
        "crawl",
        [*seeding, *collecting, *common, *pick(decl, *COLLECTING), *own],
        lambda o: crawl(o, names=True, collect=True),
        f"Seed and collect in one command: collecting starts with the first {w.unit} seeded.",
    )

    def refresh(options: Options) -> None:
        s = settings(decl, options)
        registry = load(decl, s)
        fmt = options["fmt"]
        wanted = guarded(lambda: [registry.validate_name(n) for n in options["names"] or []])

        async def body(stop: GracefulStop) -> int:
            from stagecrawl.cli.render import render_refresh
            from stagecrawl.kernel.refresh import run_refresh

            report = await run_refresh(
                registry, s, stop, wanted, options["collect"], lambda: progress("collecting", fmt)
            )
            render_refresh(decl, report, fmt)
            return exit_code(report.problems, report.interrupted, stop)

        run(body, s.grace_period)

    then_collect = Param(
        "collect",
        Annotated[
            bool, typer.Option("--collect/--no-collect", help="Collect the new events after.")
        ],
        True,
    )
    command(
        app,
        "refresh",
        [pick(decl, "names")[0], then_collect, *common, *pick(decl, *COLLECTING), *own],
        refresh,
        f"Re-check stored {w.units} and register and collect only what changed (conditional"
        " GETs; see docs/operations.md for what each registry asks).",
    )


def add_lock_command(
    app: typer.Typer,
    decl: RegistryDecl,
    extra: Sequence[Param] = (),
    expand: Callable[[Options], bool] = lambda _options: False,
    lanes: Sequence[str] = (),
) -> None:
    """`lock`: a project's pins, from lock files or a repository's tags. `expand`: whether
    every version of each locked package is registered (crates' default), from the options;
    `lanes`: those lock mode asks (crates: the index, and cargo resolves against it)."""
    w = decl.words

    def lock(options: Options) -> None:
        s = settings(decl, options)
        registry = load(decl, s)

        async def body(stop: GracefulStop) -> int:
            from stagecrawl.cli.render import render_lock
            from stagecrawl.kernel.lock import LockSources, run_lock

            sources = LockSources(
                tuple(options["lockfile"] or ()),
                options["repo_arg"],
                tuple(options["tag"] or ()),
                options["tags_matching"],
                options["all_tags"],
                options["label"],
            )
            report = await run_lock(registry, s, stop, sources, expand(options))
            render_lock(decl, report, options["fmt"])
            return exit_code(report.problems, report.interrupted, stop)

        run(body, s.grace_period)

    repo = Param(
        "repo_arg",
        Annotated[
            str | None,
            typer.Argument(help="Git URL or local path of a repository.", metavar="REPO"),
        ],
    )
    label = Param(
        "label",
        Annotated[
            str | None,
            typer.Option("--label", help="REF_TAGS label for --lockfile.", metavar="LABEL"),
        ],
    )
    command(
        app,
        "lock",
        [
            repo,
            *pick(decl, "tag", "tags_matching", "all_tags", "lockfile"),
            label,
            *extra,
            *pick(decl, "fmt", "quiet", "cache_dir", "db"),
            *(pick(decl, "contact") if lanes else []),
            *section_params(decl, lanes),
        ],
        lock,
        f"Register the {w.units} a project's lock files pin, per git tag (or lock files you have).",
    )


def add_sca_commands(app: typer.Typer, decl: RegistryDecl, resolve: Sequence[Param]) -> None:
    """vulns, audit, licenses check and backfill; `resolve`: the registry's flags a lock file
    is resolved with at a repository's tag (crates: cargo against --index-url)."""
    w = decl.words
    inputs = pick(decl, "targets", "lockfile", "repo", "tag", "tags_matching", "all_tags")

    def read_inputs(options: Options) -> Any:
        from stagecrawl.kernel.sca import Inputs

        return Inputs(
            tuple(options["targets"] or ()),
            tuple(options["lockfile"] or ()),
            options["repo"],
            tuple(options["tag"] or ()),
            options["tags_matching"],
            options["all_tags"],
        )

    def vulns(options: Options) -> None:
        s = settings(decl, options)
        registry = load(decl, s)

        async def body(stop: GracefulStop) -> int:
            from stagecrawl.cli.render import vulns_text
            from stagecrawl.kernel.sca import run_vulns

            fmt = check_format(options["fmt"], SUMMARY_FORMATS)
            check_output(options["output"])
            report = await run_vulns(
                registry, s, options["source"], options["scope"],
                options["max_archive_mb"] * 1024 * 1024, options["max_entry_kb"] * 1024, stop,
            )  # fmt: skip
            # A record skipped as malformed fails the import (exit 1; the rest is stored); an
            # advisory part that cannot be read is a warning (kept in RAW, said in the audit)
            code = EXIT_PARTIAL if report.problems else EXIT_OK
            deliver(vulns_text(decl, report, fmt, options["scope"]), options["output"], code)
            return code

        run(body, s.grace_period)

    text_format = Param(
        "fmt",
        Annotated[
            str,
            typer.Option(
                "--format",
                help="table, json or markdown (to stdout or --output).",
                metavar="[table|json|markdown]",
            ),
        ],
        "table",
    )
    command(
        app,
        "vulns",
        [
            Param(
                "source",
                Annotated[
                    str,
                    typer.Option(
                        "--source",
                        help=f"URL or local path of the OSV {decl.osv_ecosystem} dump (zip,"
                        " folder, .json).",
                        metavar="URL|PATH",
                    ),
                ],
                decl.osv_url,
            ),
            Param(
                "scope",
                Annotated[
                    str,
                    typer.Option(
                        "--scope",
                        help=f"collected: {w.units} in PRODUCT; all: every {w.unit}.",
                        metavar="[collected|all]",
                    ),
                ],
                "collected",
            ),
            Param(
                "max_archive_mb",
                Annotated[
                    int,
                    typer.Option(
                        "--max-archive-mb", min=1, metavar="MB", help="Largest OSV archive."
                    ),
                ],
                512,
            ),
            Param(
                "max_entry_kb",
                Annotated[
                    int,
                    typer.Option(
                        "--max-entry-kb", min=1, metavar="KB", help="Largest advisory in it."
                    ),
                ],
                4096,
            ),
            text_format,
            *pick(decl, "output", "quiet", "db", "contact"),
        ],
        vulns,
        f"Import OSV advisories for {decl.title} into the VULN tables and match collected"
        " versions.",
    )

    def audit(options: Options) -> None:
        s = settings(decl, options)
        registry = load(decl, s)

        async def body(stop: GracefulStop) -> int:
            from stagecrawl.cli.render import audit_text, print_notes
            from stagecrawl.kernel.sca import AuditRequest, run_audit

            fmt = check_format(options["fmt"], AUDIT_FORMATS)
            check_output(options["output"])
            request = AuditRequest(
                read_inputs(options),
                tuple(options["deny"] or ()),
                tuple(options["ignore"] or ()),
                options["severity_threshold"],
                options["max_advisory_age"],
                options["strict"],
            )
            report = await run_audit(registry, s, request, stop, options["config"])
            print_notes(report.notes)
            text = audit_text(report, fmt, options["sarif_root"], options["desc"])
            deliver(text, options["output"], report.exit_code)
            return report.exit_code

        run(body, s.grace_period)

    command(
        app,
        "audit",
        [*inputs, *gate_params(decl), *pick(decl, "cache_dir", "db"), *resolve],
        audit,
        f"Which stored advisories hit {w.unit} versions — any version, collected or not (run"
        f" `{decl.cli} vulns` first). Exit 1 when a finding fails the gate, 2 on bad input or"
        " config. Read-only.",
    )

    licenses = typer.Typer(
        help="License standardisation and policy.", no_args_is_help=True, rich_markup_mode=None
    )
    app.add_typer(licenses, name="licenses")

    def check(options: Options) -> None:
        s = settings(decl, options)
        registry = load(decl, s)

        async def body(stop: GracefulStop) -> int:
            from stagecrawl.cli.render import license_text, print_notes
            from stagecrawl.kernel.sca import run_licenses_check

            fmt = check_format(options["fmt"], SUMMARY_FORMATS)
            check_output(options["output"])
            result = await run_licenses_check(
                registry, s, options["allow"] or [], options["deny"] or [],
                options["exception"] or [], read_inputs(options), stop, options["config"],
            )  # fmt: skip
            print_notes(result.notes)
            deliver(license_text(decl, result, fmt), options["output"], result.exit_code)
            return result.exit_code

        run(body, s.grace_period)

    unit = w.unit.upper()
    command(
        licenses,
        "check",
        [
            *inputs,
            Param(
                "allow",
                _list(
                    str,
                    "--allow",
                    "Allowed licenses (comma-separated SPDX ids, 'ID WITH EXCEPTION' too).",
                    "IDS",
                ),
            ),
            Param("deny", _list(str, "--deny", "Denied SPDX ids; deny wins over allow.", "IDS")),
            Param(
                "exception",
                _list(
                    str,
                    "--exception",
                    f"{unit}=LICENSE or {unit}@VERSION=LICENSE: for that {w.unit} only.",
                    f"{unit}=LICENSE",
                ),
            ),
            text_format,
            *pick(decl, "output", "quiet", "config", "cache_dir", "db"),
            *resolve,
        ],
        check,
        f"Licenses the policy does not accept (cargo-deny's semantics): of a project's {w.units}"
        " (--lockfile, --repo with its tags, pins; a version not collected fails as unknown),"
        " or of every collected version. Exit 1 when any. Read-only.",
    )

    def backfill(options: Options) -> None:
        s = settings(decl, options)
        registry = load(decl, s)

        async def body(stop: GracefulStop) -> int:
            from stagecrawl.cli.render import render_backfill
            from stagecrawl.kernel.sca import run_backfill

            report, ai_report = await run_backfill(registry, s, options["recompute_all"], stop)
            render_backfill(report, ai_report, options["fmt"])
            return EXIT_PARTIAL if ai_report is not None and ai_report.failed else EXIT_OK

        run(body, s.grace_period)

    command(
        licenses,
        "backfill",
        [
            Param(
                "recompute_all",
                Annotated[
                    bool,
                    typer.Option("--all", help="Recompute every row, not only those lacking them."),
                ],
                False,
            ),
            *pick(decl, "fmt", "quiet", "db", "ai_license_url", "ai_rate", "contact"),
        ],
        backfill,
        "Fill STANDARD_LICENSE, LICENSE_IDS and LICENSE_EXPRESSION from the stored LICENSE (no"
        " network); with --ai-license-url, also ask the classifier for every LICENSE_AI still"
        " NULL.",
    )


def gate_params(decl: RegistryDecl) -> list[Param]:
    """The audit gate's options: format, output, config, deny, ignore, thresholds, strict."""
    return [
        Param(
            "fmt",
            Annotated[
                str,
                typer.Option(
                    "--format",
                    help="table, json, sarif, cyclonedx or markdown (to stdout or --output).",
                    metavar="[table|json|sarif|cyclonedx|markdown]",
                ),
            ],
            "table",
        ),
        *pick(decl, "output", "quiet"),
        Param(
            "sarif_root",
            Annotated[
                Path | None,
                typer.Option(
                    "--sarif-root",
                    help="SARIF paths relative to this folder [default: the lock file's"
                    " repository].",
                    metavar="DIR",
                ),
            ],
        ),
        pick(decl, "config")[0],
        Param(
            "deny",
            _list(
                str,
                "--deny",
                "Fail on informational findings too: warnings (all), unmaintained, unsound,"
                " notice, yanked. Replaces the config's list.",
                "KIND",
            ),
        ),
        Param(
            "ignore",
            _list(str, "--ignore", "An advisory id (or alias) not to fail on; repeatable.", "ID"),
        ),
        Param(
            "severity_threshold",
            Annotated[
                str | None,
                typer.Option(
                    "--severity-threshold",
                    help="Set aside hits rated below this CVSS score or level (low, medium,"
                    " high…).",
                    metavar="LEVEL",
                ),
            ],
        ),
        Param(
            "max_advisory_age",
            Annotated[
                str | None,
                typer.Option(
                    "--max-advisory-age",
                    help="Fail when the newest advisory change is older (days).",
                    metavar="DAYS",
                ),
            ],
        ),
        Param(
            "strict",
            Annotated[
                bool,
                typer.Option(
                    "--strict",
                    help="Fail when any input could not be audited (a git or path source, an"
                    " advisory not fully evaluated).",
                ),
            ],
            False,
        ),
        Param(
            "desc",
            Annotated[
                bool, typer.Option("--desc", help="Show each advisory's description (details).")
            ],
            False,
        ),
    ]


def registry_app(decl: RegistryDecl, resolve: Sequence[Param] = ()) -> typer.Typer:
    """The `stagecrawl <registry> …` group every registry has (`resolve`: see
    `add_sca_commands`)."""
    app = typer.Typer(
        help=f"The {decl.title} pipeline: seed, collect, crawl, lock, audit…",
        no_args_is_help=True,
        rich_markup_mode=None,  # click's plain help: `--limit N`, not a `<int>` column
    )
    add_collect_commands(app, decl)
    add_sca_commands(app, decl, resolve)
    return app
