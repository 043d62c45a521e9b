"""``harvester export``: the checks before a byte is written, then the JSONL or WARC stream into a file that replaces
the output only when complete (``cli_output``). Out of cli.py, which holds the commands' signatures."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import typer
from pydantic import TypeAdapter, ValidationError

from harvester.cli_db import open_frontier, unreadable
from harvester.cli_output import refuse_database_target, refuse_wrong_suffix, replaced_on_success
from harvester.cli_tables import console
from harvester.runtime import aware
from harvester.settings import Settings

SINCE_FORMS = ("an ISO 8601 date or time: 2026-12-01, 2026-12-01T06:00:00 (UTC), 2026-12-01T06:00:00+02:00, "
               "or a Unix timestamp")


def since_of(value: str | None) -> datetime | None:
    """``--since`` as typed: what pydantic reads as a datetime (``yesterday`` got its bare "input is too short"),
    else a line naming the accepted forms. A time without a zone is UTC."""
    if value is None:
        return None
    try:
        moment = TypeAdapter(datetime).validate_python(value.strip())
    except ValidationError:
        raise typer.BadParameter(f"--since {value!r} is not a time; give {SINCE_FORMS} "
                                 "(for yesterday: --since $(date -u -d yesterday +%F))") from None
    return aware(moment)


def run_export(output: Path, fmt: str, since: datetime | None, latest: bool, text: bool, settings: Settings) -> None:
    """Write the export (docs/export.md); nothing is touched before every check passed, and ``output`` is replaced
    only by a complete file."""
    from harvester import export as exporter
    from harvester.errors import ConfigError
    from harvester.frontier.check import Damage

    if fmt not in ("jsonl", "warc"):
        raise typer.BadParameter(f"--format {fmt!r}: use jsonl or warc")
    if latest and fmt != "jsonl":
        raise typer.BadParameter("--latest is a JSONL snapshot; a WARC file holds every stored exchange")
    if text and fmt != "jsonl":
        raise typer.BadParameter("--text adds fields to JSONL; a WARC file holds the pages' bytes as fetched")
    refuse_wrong_suffix(output, fmt)
    if not output.parent.is_dir():
        raise typer.BadParameter(f"-o {str(output)!r}: the directory {str(output.parent)!r} does not exist; create it "
                                 "or write elsewhere")
    refuse_database_target(output, settings)
    try:
        main = exporter.MainText() if text else None
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from None
    damage = Damage()  # rows a damaged file cannot give: the rest is exported, these are named
    # The store first: a wrong --db must not empty an existing output file, nor be set up as a new database.
    with open_frontier(settings, read_only=True) as store:
        where = store.url_display
        # A WARC is gzipped as a whole by its writer (one member per record); -o pages.jsonl.gz is gzipped here.
        gzipped = fmt == "jsonl" and output.name.lower().endswith(".gz")
        with replaced_on_success(output, gzipped=gzipped) as out:
            if fmt == "jsonl":
                # Every version of every kind (listing pages' too, `kind` says which); the snapshot: detail pages.
                kinds = ("detail",) if latest else None
                pages = store.iter_pages(since=since, latest=latest, damage=damage, kinds=kinds)
                count = exporter.export_jsonl(pages, out, main=main)
                # A window's changes include its deletions (not in a snapshot, which holds live pages only).
                left = 0 if since is None or latest else exporter.export_departures(
                    store.iter_departures(since=since, kinds=kinds), out, main=main is not None)
            else:
                counts = exporter.WarcCounts()
                # The User-Agents the harvest's runs sent, never this process's setting (an export runs anywhere).
                agents = store.request_user_agents(since=since)
                exporter.export_warc(store.iter_fetches(since=since, damage=damage), out, filename=output.name,
                                     user_agents=agents, counts=counts)
    if fmt == "jsonl":
        went = f" and {left} pages gone or moved since {since.isoformat()}" if since is not None and not latest else ""
        console.print(f"wrote {count} {'pages' if latest else 'page versions'}{went} to {output}"
                      + (" (gzipped)" if gzipped else ""), soft_wrap=True)
        unreadable(damage, where)
        return
    records = counts.responses + counts.revisits + counts.requests
    left_out = ", ".join(f"{n} {what}" for n, what in counts.left_out_parts())
    console.print(f"wrote {records} WARC records to {output}: {counts.responses} responses, "
                  f"{counts.revisits} revisits, {counts.requests} requests"
                  + (f"; left out fetches: {left_out}" if left_out else ""))
    if None in agents:
        console.print("the User-Agent of requests logged before migration 0013 was not recorded: their request "
                      "records carry none, and the warcinfo says it is not known")
    unreadable(damage, where)
