"""The polite fetch: HTTP (the only module that imports httpx), the address policy and its resolver, robots.txt,
per-host politeness gates, the per-host client and workers (``engine``), and the persistence of what politeness
learned (``host_policy``).

May use: ``rules``, ``records``, ``settings``, ``runtime``, ``errors``. Must not: speak SQL (state reaches the
frontier through the small protocols it is handed), parse sitemaps or feeds, or import Prefect.
"""
