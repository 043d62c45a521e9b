"""Discovery parsers: sitemaps, feeds and the links of a page turned into candidate URLs.

Bytes in, records out. May use: ``rules``, ``records``, ``settings``, ``errors``. Must not: fetch, speak SQL or
import Prefect (``phases.discover_host`` wires these to the polite fetch and the frontier).
"""

from __future__ import annotations
