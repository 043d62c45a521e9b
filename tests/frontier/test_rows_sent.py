"""Which completions count as a request sent (``fetched``): a refusal decided before any request left is not one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from harvester.frontier.rows import sent
from harvester.records import Completion, ErrorClass, UrlState

NOW = datetime(2026, 12, 6, tzinfo=UTC)


@pytest.mark.parametrize("error_class", [ErrorClass.PARKED, ErrorClass.ROBOTS_DISALLOWED, ErrorClass.ADDRESS_REFUSED,
                                         ErrorClass.INVALID_URL])
def test_a_refusal_before_any_request_is_not_a_request_sent(error_class: ErrorClass) -> None:
    completion = Completion(url_id=1, state=UrlState.FAILED, fetched_at=NOW, error_class=error_class)
    assert not sent(completion)


def test_a_failure_met_on_the_way_is_a_request_sent() -> None:
    """The control: a connection that failed was still a request the site may have seen."""
    completion = Completion(url_id=1, state=UrlState.FAILED, fetched_at=NOW, error_class=ErrorClass.CONNECT)
    assert sent(completion)
