"""A known path probed absent (404/410) keeps no copy of what it was: its stored children were read as an answer on
the days it waited, so the probes stopped at a stale copy and a newly published /sitemap_index.xml went unread
(review), and its old validators made the next ask conditional on a file that is gone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from harvester.records import DEADLINE_PASSED, DocumentState, ErrorClass, FetchResult
from harvester.rules.revisit_documents import absent_count, cut_while_reading, failed
from harvester.settings import Settings

URL = "http://127.0.0.1:1/sitemap.xml"
NOW = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)


def test_a_path_probed_absent_keeps_no_copy_and_counts_its_misses() -> None:
    settings = Settings()
    was = DocumentState(url=URL, kind="sitemap", status=200, etag='"v1"', content_hash="abc",
                        last_modified="Mon, 30 Nov 2026 06:00:00 GMT", children=("http://127.0.0.1:1/s1.xml",),
                        fetched_at=NOW - timedelta(days=1))
    gone = FetchResult(url=URL, final_url=URL, status=404, started_at=0.0, elapsed_s=0.01)
    first = failed(URL, "sitemap", gone, NOW, was, settings, absent=True)
    assert (first.content_hash, first.children, first.etag, first.last_modified) == (None, (), None, None)
    assert absent_count(first.error) == 1
    second = failed(URL, "sitemap", gone, NOW + timedelta(days=1), first, settings, absent=True)
    assert absent_count(second.error) == 2 and second.next_fetch_at is not None
    assert second.next_fetch_at > first.next_fetch_at + timedelta(days=1)  # a growing interval


def test_only_the_whole_fetch_deadline_counts_as_cut_while_reading() -> None:
    """A stall between two reads (httpx's read timeout) is a hiccup, retried in the run; only the whole-fetch
    deadline passing while the body arrives says the link is too slow for the document (review: one hiccup on a
    named sitemap meant no retry and a day's wait)."""
    def timeout(error: str) -> FetchResult:
        return FetchResult(url=URL, final_url=URL, status=None, started_at=0.0, elapsed_s=5.0,
                           error_class=ErrorClass.TIMEOUT, error=error, bytes_read=100_000)
    assert cut_while_reading(timeout(f"{DEADLINE_PASSED} 204s passed"))
    assert not cut_while_reading(timeout("ReadTimeout: read timed out"))
