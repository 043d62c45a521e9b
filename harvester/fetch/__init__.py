"""The polite fetch: HTTP (the only module that imports httpx), the address policy and its resolver, robots.txt,
per-host politeness gates, the per-host client and workers (``engine``), and the persistence of what politeness
learned (``host_policy``).

May use: ``rules``, ``records``, ``settings``, ``runtime``, ``errors``. Must not: speak SQL (state reaches the
frontier through the small protocols it is handed), parse sitemaps or feeds, or import Prefect.
"""

import ssl as _ssl
import sys as _sys
from collections.abc import Iterator as _Iterator
from contextlib import contextmanager as _contextmanager


@_contextmanager
def _without_default_tls() -> _Iterator[None]:
    """aiohttp builds two default TLS contexts when imported, each loading the system's CA bundle: about 50 ms of CPU
    on an idle machine, 1.4 s of a CLI run's start under load (py-spy, issue 31). The harvester never uses them:
    every connector it makes is given its own context (``transport.shared_ssl_context`` for https, a CA-less one
    for plain http). So while aiohttp is first imported they are built without the bundle: verification stays on
    with nothing trusted, and a connection that ever fell back on them would fail closed, never open unverified."""
    create, paths = _ssl.create_default_context, _ssl.SSLContext.set_default_verify_paths
    _ssl.create_default_context = lambda *_args, **_kwargs: _ssl.SSLContext(_ssl.PROTOCOL_TLS_CLIENT)
    _ssl.SSLContext.set_default_verify_paths = lambda _self: None  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        _ssl.create_default_context = create
        _ssl.SSLContext.set_default_verify_paths = paths  # type: ignore[method-assign, assignment]


if "aiohttp" not in _sys.modules:  # already imported by the application: its contexts are built, nothing to spare
    with _without_default_tls():
        import aiohttp.connector  # noqa: F401
