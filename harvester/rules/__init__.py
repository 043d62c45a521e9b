"""Pure decisions: the canonical form and scope of a URL, whether a found URL is admitted, how a link is
classified, how URLs are scored, when a page or a discovery document is due again, and what an extraction run
counts to stop.

May use: ``records``, ``settings``, ``runtime``, ``errors``. Must not: fetch, speak SQL, parse documents or
import Prefect. Everything here is a function of its arguments (or of small per-site state passed in), so each
rule is tested with plain values.
"""
