"""Discovery parsers: sitemaps, feeds and listing pages turned into candidate URLs, plus the per-host report.

Everything here takes bytes and returns records; nothing fetches or touches SQL (harvester/phases.py wires
these to the fetch engine and the frontier store).
"""

from __future__ import annotations
