"""Where a call is posted: an endpoint's path joined to a backend's (or a collector's) base URL.

A base URL may carry a query (``?api-version=…``, as Azure's are written, or a ``?key=``): the
path goes after the base's own path, the query after both. Pure: no I/O.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = ["endpoint_url"]


def endpoint_url(base_url: str, path: str) -> str:
    """The address a call to ``path`` (``/chat/completions``) is posted to: ``path`` after
    ``base_url``'s own path, and the base's query (``?api-version=…``) kept after both."""
    if "?" not in base_url and "#" not in base_url:
        return base_url.rstrip("/") + path
    try:
        parts = urlsplit(base_url)
    except ValueError:  # validation refuses such a URL
        return base_url.rstrip("/") + path
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + path, fragment=""))
