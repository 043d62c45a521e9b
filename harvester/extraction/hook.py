"""The user's extractor hook: named as "module:function" in a profile or passed as a callable, called on each page,
its fields kept as bounded JSON; a failing hook fails the page's extraction, never the run."""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from harvester.discovery.listings import PageLinks
from harvester.errors import ConfigError
from harvester.extraction.model import MAX_HOOK_FIELDS_BYTES, Extracted, ExtractorHook, Page, host_of
from harvester.records import ErrorClass, FetchResult

logger = logging.getLogger(__name__)


# --- the user hook ------------------------------------------------------------------------------------------


def load_hook(spec: str) -> ExtractorHook:
    """The callable named ``module:function`` in a site profile's ``extractor`` field.

    Raises ``ConfigError`` naming the field and the value when the module cannot be imported, the function is
    missing, or it is not callable: a bad profile must fail before the harvest starts, not per page.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"site profile field 'extractor'={spec!r}: expected 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of user code is a configuration problem
        raise ConfigError(
            f"site profile field 'extractor'={spec!r}: cannot import module {module_name!r}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    try:
        hook = getattr(module, attr)
    except AttributeError:
        raise ConfigError(
            f"site profile field 'extractor'={spec!r}: module {module_name!r} has no attribute {attr!r}"
        ) from None
    if not callable(hook):
        raise ConfigError(
            f"site profile field 'extractor'={spec!r}: {attr!r} is a {type(hook).__name__}, not a callable"
        )
    checked: ExtractorHook = hook
    return checked


def resolve_hook(spec: str | None, hook: ExtractorHook | None = None) -> ExtractorHook | None:
    """The extractor of a run: a callable handed to ``harvest()``/``extract()`` or the profile's ``module:function``.

    A callable cannot live in the profile (the profile is stored with each run and serialised to Prefect
    parameters, so it holds the importable name); library callers may pass the function itself instead. Both
    at once is ambiguous, so it is refused rather than one silently ignored.
    """
    if hook is None:
        return load_hook(spec) if spec else None
    if spec:
        raise ConfigError(
            f"site profile field 'extractor'={spec!r} and an extractor callable were both given: pass one of them"
        )
    if not callable(hook):
        raise ConfigError(f"extractor: a {type(hook).__name__} is not a callable (it is called with each Page)")
    return hook


def robots_directives(links: PageLinks) -> tuple[str, ...]:
    """What a page's robots directives asked of us, as stored with it and exported (``noindex``, ``nofollow``)."""
    return (("noindex",) if links.robots_noindex else ()) + (("nofollow",) if links.robots_nofollow else ())


def with_hook(
    extracted: Extracted, result: FetchResult, hook: ExtractorHook | None, *, text: str, encoding: str, main_text: str
) -> Extracted:
    if hook is None:
        return extracted
    page = Page.build(result, extracted.page, text=text, encoding=encoding, main_text=main_text)
    try:
        returned = hook(page)
    except Exception as exc:  # a user hook may raise anything; the page fails, the harvest goes on
        message = f"extractor hook raised {type(exc).__name__}: {exc}"[:1000]
        logger.warning("%s on %s", message, page.final_url,
                       extra={"host": host_of(page.final_url), "error_class": ErrorClass.HOOK_FAILED.value})
        return _failed(extracted, message)
    fields, problem = _json_fields(returned)
    if problem is not None:
        logger.warning("%s on %s", problem, page.final_url,
                       extra={"host": host_of(page.final_url), "error_class": ErrorClass.HOOK_FAILED.value})
        return _failed(extracted, problem)
    return replace(extracted, page=replace(extracted.page, fields=fields))


def _json_fields(returned: object) -> tuple[dict[str, Any], str | None]:
    if returned is None:
        return {}, None
    if not isinstance(returned, Mapping):
        return {}, f"extractor hook returned {type(returned).__name__}, expected a dict of JSON-able fields"
    if not all(isinstance(key, str) for key in returned):
        return {}, "extractor hook returned a dict with non-string keys; JSON objects need string keys"
    try:
        serialized = json.dumps(dict(returned), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return {}, f"extractor hook returned fields that are not JSON-able: {exc}"[:1000]
    if len(serialized.encode("utf-8")) > MAX_HOOK_FIELDS_BYTES:
        return {}, f"extractor hook returned {len(serialized)} characters of fields; the cap is {MAX_HOOK_FIELDS_BYTES}"
    fields: dict[str, Any] = json.loads(serialized)  # a plain copy: tuples become lists, no shared objects
    return fields, None


def _failed(extracted: Extracted, message: str) -> Extracted:
    return replace(extracted, error_class=ErrorClass.HOOK_FAILED, error=message)
