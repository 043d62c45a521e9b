"""Discovery documents asked per run, read from a real server's access log over daily CLI runs (issue 31, item 6).

    .venv/bin/python bench/discovery_daily.py [--days 3] [--out access.jsonl]

Three hosts on their own loopback addresses (127.0.0.21-23), one server process writing every request to an access
log: A answers robots.txt 404 and redirects /sitemap.xml to /sitemap_index.xml; B redirects robots.txt (301) to
/robots-real.txt, which disallows /private/ that its sitemap names (three such URLs, two from run 3 on); C names
a gzip bomb, billion laughs, an XXE, a truncated urlset (each with an ETag but the XXE, which has a Last-Modified)
and a good sitemap. ``harvester harvest`` runs on day 0, then ``harvester recrawl`` 24 h apart give or take a few
minutes (``HARVESTER_NOW``), and once more ten minutes after day 1's (a restart). Prints, per run, each discovery
document's requests as full/conditional and the statuses, and the robots refusals ``harvester status`` counts.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import socket
import subprocess
import sys
import tempfile
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aiohttp import web

HOSTS = {"a": "127.0.0.21", "b": "127.0.0.22", "c": "127.0.0.23"}
DAY0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
RUNS = [("harvest", timedelta(0)), ("recrawl", timedelta(days=1, minutes=-3)),
        ("recrawl", timedelta(days=1, minutes=7)), ("recrawl", timedelta(days=2, minutes=4)),
        ("recrawl", timedelta(days=3, minutes=-2))]
NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
PAGE = "<html><body><main><p>{} " + "words " * 60 + "</p></main></body></html>"
DOCUMENTS = ("/robots.txt", "/robots-real.txt", "/sitemap.xml", "/sitemap_index.xml", "/sm-1.xml", "/sm.xml",
             "/bomb.xml.gz", "/laughs.xml", "/xxe.xml", "/trunc.xml", "/good.xml")


def urlset(origin: str, paths: list[str]) -> str:
    return f"<urlset {NS}>" + "".join(f"<url><loc>{origin}{p}</loc></url>" for p in paths) + "</urlset>"


def make_app(log: Path, bomb: bytes) -> web.Application:
    out = log.open("a", buffering=1)

    def tagged(request: web.Request, etag: str | None, body: bytes | str, ctype: str = "application/xml",
               last_modified: str | None = None) -> web.Response:
        headers = {}
        if etag:
            headers["ETag"] = etag
        if last_modified:
            headers["Last-Modified"] = last_modified
        if (etag and request.headers.get("If-None-Match") == etag) or (
                last_modified and request.headers.get("If-Modified-Since") == last_modified):
            return web.Response(status=304, headers=headers)
        if isinstance(body, str):
            body = body.encode()
        return web.Response(body=body, content_type=ctype, headers=headers)

    async def handle(request: web.Request) -> web.StreamResponse:
        host, path = request.host.split(":")[0], request.path
        origin = f"http://{request.host}"
        name = next(k for k, v in HOSTS.items() if v == host)
        response: web.StreamResponse
        if name == "a":
            if path == "/robots.txt":
                response = web.Response(status=404)
            elif path == "/sitemap.xml":
                response = web.Response(status=301, headers={"Location": f"{origin}/sitemap_index.xml"})
            elif path == "/sitemap_index.xml":
                response = tagged(request, '"ia"', f"<sitemapindex {NS}><sitemap><loc>{origin}/sm-1.xml</loc>"
                                                   "</sitemap></sitemapindex>")
            elif path == "/sm-1.xml":
                response = tagged(request, '"a1"', urlset(origin, [f"/a/{i}" for i in range(5)]))
            elif path == "/":
                response = tagged(request, '"home"', PAGE.format("home"), "text/html")
            elif path.startswith("/a/"):
                response = tagged(request, f'"{path}"', PAGE.format(path), "text/html")
            else:
                response = web.Response(status=404)
        elif name == "b":
            if path == "/robots.txt":
                response = web.Response(status=301, headers={"Location": f"{origin}/robots-real.txt"})
            elif path == "/robots-real.txt":
                response = tagged(request, '"rb"', f"User-agent: *\nDisallow: /private/\nSitemap: {origin}/sm.xml\n",
                                  "text/plain")
            elif path == "/sm.xml":  # from run 3 on, it names /private/2 no more
                later = os.environ.get("RUN", "run 0") >= "run 3"
                paths = [f"/b/{i}" for i in range(5)] + [f"/private/{i}" for i in range(2 if later else 3)]
                response = tagged(request, '"b2"' if later else '"b1"', urlset(origin, paths))
            elif path == "/" or path.startswith("/b/"):
                response = tagged(request, f'"{path}"', PAGE.format(path), "text/html")
            else:
                response = web.Response(status=404)
        else:
            names = ["/bomb.xml.gz", "/laughs.xml", "/xxe.xml", "/trunc.xml", "/good.xml"]
            if path == "/robots.txt":
                response = tagged(request, '"rc"', "User-agent: *\nAllow: /\n" + "".join(
                    f"Sitemap: {origin}{n}\n" for n in names), "text/plain")
            elif path == "/bomb.xml.gz":
                response = tagged(request, '"bomb"', bomb, "application/gzip")
            elif path == "/laughs.xml":
                response = tagged(request, '"laughs"', '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
                                  '<!ENTITY lol2 "&lol;&lol;&lol;&lol;">]>'
                                  f'<urlset {NS}><url><loc>&lol2;</loc></url></urlset>')
            elif path == "/xxe.xml":
                response = tagged(request, None, '<?xml version="1.0"?><!DOCTYPE u [<!ENTITY x SYSTEM '
                                  f'"file:///etc/passwd">]><urlset {NS}><url><loc>&x;</loc></url></urlset>',
                                  last_modified="Mon, 02 Mar 2026 00:00:00 GMT")
            elif path == "/trunc.xml":
                response = tagged(request, '"trunc"', urlset(origin, ["/c/t0", "/c/t1"])[:-40])
            elif path == "/good.xml":
                response = tagged(request, '"good"', urlset(origin, ["/c/g0", "/c/g1"]))
            elif path == "/" or path.startswith("/c/"):
                response = tagged(request, f'"{path}"', PAGE.format(path), "text/html")
            else:
                response = web.Response(status=404)
        conditional = bool(request.headers.get("If-None-Match") or request.headers.get("If-Modified-Since"))
        out.write(json.dumps({"now": os.environ.get("RUN", ""), "host": name, "path": path,
                              "status": response.status, "conditional": conditional}) + "\n")
        return response

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    return app


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.21", 0))
        return int(sock.getsockname()[1])


async def serve_forever(log: Path, port: int, bomb: bytes, run_file: Path) -> None:
    app = make_app(log, bomb)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    for address in HOSTS.values():
        await web.TCPSite(runner, address, port).start()
    print("ready", flush=True)
    while True:
        await asyncio.sleep(0.05)
        if await asyncio.to_thread(run_file.exists):
            os.environ["RUN"] = await asyncio.to_thread(run_file.read_text)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=len(RUNS))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        log, port, run_file = args.serve
        bomb = gzip.compress(b"\0" * (120 << 20), compresslevel=9)
        asyncio.run(serve_forever(Path(log), int(port), bomb, Path(run_file)))
        return
    work = Path(tempfile.mkdtemp(prefix="discovery-daily-"))
    log = args.out or work / "access.jsonl"
    run_file = work / "run"
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(log), str(port), str(run_file)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready"
        seeds = [f"http://{address}:{port}/" for address in HOSTS.values()]
        db = f"sqlite:///{work / 'harvester.db'}"
        harvester = str(Path(sys.executable).with_name("harvester"))
        for index, (command, offset) in enumerate(RUNS[: args.runs]):
            label = f"run {index} ({command} at day0{offset_text(offset)})"
            run_file.write_text(label)
            env = {**os.environ, "HARVESTER_NOW": (DAY0 + offset).isoformat().replace("+00:00", "Z")}
            argv = [harvester, command, *seeds, "--db", db] if command == "harvest" else [
                harvester, command, "--db", db]
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                print(done.stdout[-3000:], done.stderr[-3000:])
                raise SystemExit(f"{label} failed")
            status = subprocess.run([harvester, "status", "--json", "--db", db], env=env, capture_output=True,
                                    text=True, check=True)
            refused = json.loads(status.stdout).get("last_discover", {}).get("robots_refused_by_host")
            print(f"{label}: refused {refused}")
        import time
        time.sleep(0.3)
    finally:
        server.kill()
        server.wait()
    report(log)


def offset_text(offset: timedelta) -> str:
    minutes = int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    days, rest = divmod(abs(minutes), 1440)
    return f" {sign} {days} d {rest // 60:02d}:{rest % 60:02d}" if minutes else ""


def report(log: Path) -> None:
    runs: dict[str, dict[tuple[str, str], list[str]]] = defaultdict(lambda: defaultdict(list))
    for line in log.read_text().splitlines():
        row = json.loads(line)
        if row["path"] in DOCUMENTS:
            runs[row["now"]][(row["host"], row["path"])].append(f"{row['status']}{'c' if row['conditional'] else ''}")
    for run, asked in runs.items():
        print(run)
        for (host, path), answers in sorted(asked.items()):
            print(f"    {host} {path:20} {len(answers)}x {' '.join(answers)}")
    print(f"access log: {log}")


if __name__ == "__main__":
    main()
