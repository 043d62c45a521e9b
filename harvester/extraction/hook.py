"""The user's extractor hook: named as "module:function" in a profile or passed as a callable, called on each page,
its fields kept as bounded JSON; a hook failing on a page leaves that page stored with the hook's error and no
fields (repaired by the hook's next run), never fails the run, unless it failed on every page."""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import sys
import traceback
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

from harvester.discovery.listings import PageLinks
from harvester.errors import ConfigError
from harvester.extraction.model import (
    MAX_HOOK_FIELDS_BYTES,
    Extracted,
    ExtractorHook,
    Page,
    host_of,
    without_surrogates,
)
from harvester.records import ErrorClass, FetchResult

logger = logging.getLogger(__name__)


# --- the user hook ------------------------------------------------------------------------------------------


def load_hook(spec: str) -> ExtractorHook:
    """The callable named ``module:function`` or ``path/to/file.py:function`` in a site profile's ``extractor``.

    A ``module`` that is not importable but is a ``module.py`` in the working directory is loaded from there, as
    ``python myext.py`` would find it (no ``PYTHONPATH=.`` needed). Raises ``ConfigError`` naming the field and the
    value when the file or module cannot be loaded, the function is missing, or it is not callable: a bad profile
    must fail before the harvest starts, not per page.
    """
    source, sep, attr = spec.rpartition(":")  # the last colon: a Windows path has one of its own
    if not sep or not source or not attr.isidentifier():
        raise ConfigError(f"site profile field 'extractor'={spec!r}: expected 'module:function' or 'file.py:function'")
    try:
        module = _module_of(source)
    except ConfigError as exc:
        raise ConfigError(f"site profile field 'extractor'={spec!r}: {exc}") from exc.__cause__
    except Exception as exc:  # any import-time failure of user code is a configuration problem
        raise ConfigError(
            f"site profile field 'extractor'={spec!r}: cannot import {'file' if is_file_spec(source) else 'module'} "
            f"{source!r}: {type(exc).__name__}: {exc}"
        ) from exc
    try:
        hook = getattr(module, attr)
    except AttributeError:
        raise ConfigError(
            f"site profile field 'extractor'={spec!r}: {source!r} has no attribute {attr!r}"
        ) from None
    if not callable(hook):
        raise ConfigError(
            f"site profile field 'extractor'={spec!r}: {attr!r} is a {type(hook).__name__}, not a callable"
        )
    checked: ExtractorHook = hook
    return checked


def is_file_spec(source: str) -> bool:
    """A hook named by its file (``./myext.py``, ``hooks/myext.py``), not by an importable module name."""
    return source.endswith(".py") or "/" in source or os.sep in source


def absolute_spec(spec: str | None) -> str | None:
    """``spec`` with a relative file made absolute: a profile is stored with its run and read back by a later
    ``recrawl`` (or a Prefect worker) that may start in another directory."""
    if spec is None:
        return None
    source, sep, attr = spec.rpartition(":")
    if not sep or not is_file_spec(source):
        return spec
    return f"{Path(source).expanduser().resolve()}:{attr}"


def _module_of(source: str) -> ModuleType:
    if is_file_spec(source):
        return _load_file(Path(source).expanduser())
    try:
        return importlib.import_module(source)
    except ModuleNotFoundError as exc:
        local = Path(*source.split(".")).with_suffix(".py")
        if exc.name != source.split(".")[0] or not local.is_file():
            raise
        return _load_file(local)


def _load_file(path: Path) -> ModuleType:
    """The module of ``path``, loaded once per process under a name of its own (never shadowing an installed
    module of the same stem); its directory joins ``sys.path`` so it may import its neighbours."""
    path = path.resolve()
    if not path.is_file():
        raise ConfigError(f"no file {str(path)!r}; give an existing .py file or an importable module")
    name = f"_harvester_hook_{path.stem}_{abs(hash(str(path))):x}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{str(path)!r} cannot be loaded as a Python module; give a .py file")
    module = importlib.util.module_from_spec(spec)
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


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


_traced: set[int] = set()
"""The hooks (by ``id``) whose first failure was logged with its traceback in this process."""

HOOK_OK_COUNTERS = ("text_new", "text_changed", "text_same", "duplicate")
"""Extraction counters of pages the hook ran on and returned from (``rules.revisit.next_state``)."""


def hook_failed_everywhere(counters: Mapping[str, int]) -> str | None:
    """Why a run must fail when its hook failed on every page it was given (None otherwise): a hook broken for
    every page extracts nothing, and an exit status of 0 hid that (issue 34). Some pages failing is the pages'
    problem (each is stored with its error, the counts say how many), not the run's."""
    failed = int(counters.get("hook_failed", 0))
    if failed == 0 or any(counters.get(name, 0) for name in HOOK_OK_COUNTERS):
        return None
    return (f"the extractor hook failed on all {failed} pages it was given (the log has the first traceback); the "
            "pages are stored, each with the hook's error and no fields: fix the hook and run again (harvester "
            "recrawl), and the next run asks those pages again and runs the hook on them")


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
        detail = _message_of(exc)
        message = f"extractor hook raised {type(exc).__name__}: {detail}"[:1000]
        first = id(hook) not in _traced  # one traceback per hook: enough to find the bug, not one per page
        _traced.add(id(hook))
        # The traceback written here, not by ``exc_info``: its last line repeats the hook's message raw, and a lone
        # surrogate in it has no UTF-8 form (a log file, the Prefect API, pytest-xdist's report all refused it).
        trace = "\n" + without_surrogates("".join(traceback.format_exception(exc))).rstrip() if first else ""
        logger.warning("%s on %s%s", message, page.final_url, trace,
                       extra={"host": host_of(page.final_url), "error_class": ErrorClass.HOOK_FAILED.value})
        return _failed(extracted, message, type(exc).__name__, detail)
    fields, problem = _json_fields(returned)
    if problem is not None:
        logger.warning("%s on %s", problem, page.final_url,
                       extra={"host": host_of(page.final_url), "error_class": ErrorClass.HOOK_FAILED.value})
        return _failed(extracted, problem, BAD_RETURN, problem)
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
    # A lone surrogate (a string the hook built from a page's "\ud83d") has no UTF-8 form: U+FFFD, as in JSON-LD.
    # In the serialized text (ensure_ascii=False leaves it there, inside a string) it is replaced without a walk.
    serialized = without_surrogates(serialized)
    if len(serialized.encode("utf-8")) > MAX_HOOK_FIELDS_BYTES:
        return {}, f"extractor hook returned {len(serialized)} characters of fields; the cap is {MAX_HOOK_FIELDS_BYTES}"
    fields: dict[str, Any] = json.loads(serialized)  # a plain copy: tuples become lists, no shared objects
    return fields, None


def _message_of(exc: Exception) -> str:
    """The message of what a hook raised, storable: its lone surrogates made U+FFFD; an exception whose ``str``
    itself raises is named by its class alone (the hook's failure stays the page's, never the run's)."""
    try:
        return without_surrogates(str(exc))
    except Exception:  # a user exception's __str__ may raise anything too
        return f"<{type(exc).__name__} whose message could not be read>"


BAD_RETURN = "BadReturn"
"""The ``class`` of a page's hook error when the hook returned instead of raising, but not a JSON-able dict."""

HOOK_MESSAGE_CHARS = 300
"""A stored hook error's message is cut here: enough to tell one bug from another, small beside the page."""


def _failed(extracted: Extracted, message: str, kind: str, detail: str) -> Extracted:
    """The page as extracted without the hook, carrying its error: stored like any page (its fields none), so the
    payload, validators and change label are kept, and repaired by the hook's next run on it."""
    page = replace(extracted.page, fields={}, hook_error={"class": kind, "message": detail[:HOOK_MESSAGE_CHARS]})
    return replace(extracted, page=page, error_class=ErrorClass.HOOK_FAILED, error=message)
