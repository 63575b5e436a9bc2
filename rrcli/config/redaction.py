"""Keys go nowhere: the one redaction of a secret from text, and the secrets a profile holds.

A server may send a backend's key back in any string (an error message or type, a model name, a
request id, an SSE event, a body kept in a result). ``redact`` masks it in every form it takes
in text: as written, JSON-escaped, Python-escaped (how an HTTP client's error shows a header
value) and URL-encoded. Text is always redacted before it is cut: a cut key leaves a prefix no
search can find. The profile's other secrets (a password in the Redis URL, a token in a
base_url's query, a header that carries credentials, the arguments of a command that prints a
token: ``--password x``) are masked where a profile is printed.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlencode, urlsplit, urlunsplit

__all__ = [
    "MASK",
    "command_secrets",
    "is_secret_header",
    "looks_like_key",
    "redact",
    "redact_each",
    "redacted_command",
    "redacted_headers",
    "redacted_url",
    "secret_forms",
    "url_secrets",
]

MASK = "***"
#: Shorter secrets are not masked: masking "ab" would rewrite every answer, and such a string
#: is no key worth stealing.
MIN_SECRET = 4
#: Header names whose values are credentials (compared lower-case), and name parts that say so.
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
_SECRET_WORDS = ("key", "token", "secret", "auth", "password", "session", "signature")
#: Query parameters of a URL that carry credentials (compared lower-case, ``-`` as ``_``).
SECRET_PARAMS = frozenset(
    {"key", "api_key", "apikey", "token", "access_token", "auth", "sig", "signature", "code"}
)
_PERCENT = re.compile(r"%[0-9A-F]{2}")
_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|%([0-7][0-9a-fA-F])")
#: a command's option name, shown as written (``--resource``, ``-o``); its value is masked
_OPTION = re.compile(r"--?[A-Za-z][A-Za-z0-9-]*")
_KEY_PREFIXES = ("sk-", "sk_", "pk-", "rk-", "xai-", "gsk_", "hf_", "AIza", "ghp_", "key-")


@lru_cache(maxsize=256)
def secret_forms(secret: str) -> tuple[str, ...]:
    """Every spelling of ``secret`` that text may carry, longest first (none when it is too
    short to mask)."""
    if len(secret) < MIN_SECRET:
        return ()
    quoted = quote(secret, safe="")
    forms = {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        quoted,
        _PERCENT.sub(lambda m: m.group().lower(), quoted),
        quote_plus(secret),
    }
    return tuple(sorted(forms, key=len, reverse=True))


def redact(text: str, secret: str | None) -> str:
    """``text`` with every form of ``secret`` replaced by ``***``; a text that spells it with
    escapes of its own choosing (``\\u0073k-…``, ``%73k-…``) is unescaped where it does."""
    if not secret:
        return text
    forms = secret_forms(secret)
    for form in forms:
        if form in text:
            text = text.replace(form, MASK)
    if forms and ("\\u" in text or "%" in text):
        plain = _ESCAPE.sub(_unescape, text)
        if plain != text and any(form in plain for form in forms):
            return redact(plain, secret)
    return text


def redact_each(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every form of each of ``secrets`` masked."""
    for secret in secrets:
        text = redact(text, secret)
    return text


def _unescape(match: re.Match[str]) -> str:
    """One JSON ``\\uXXXX`` or ASCII ``%XX`` escape as its character (a surrogate stays)."""
    code = int(match.group(1) or match.group(2), 16)
    return match.group() if 0xD800 <= code < 0xE000 else chr(code)


def redacted_url(url: str) -> str:
    """``url`` with a password and credential-bearing query parameters (``?key=``,
    ``access_token=``...) replaced by ``***``: URLs are printed, their secrets never."""
    try:
        parts = urlsplit(url)
        password, port = parts.password, parts.port
    except ValueError:
        return url
    if password is not None:
        user = parts.username or ""
        netloc = f"{user}:{MASK}@{parts.hostname or ''}" + (f":{port}" if port else "")
        parts = parts._replace(netloc=netloc)
    if parts.query:
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        if any(_secret_param(name) for name, _ in pairs):
            masked = [(n, MASK if _secret_param(n) else v) for n, v in pairs]
            parts = parts._replace(query=urlencode(masked, safe="*"))
    return urlunsplit(parts)


def url_secrets(url: str) -> tuple[str, ...]:
    """What ``redacted_url`` masks in ``url``, as values: its password and the values of its
    credential-bearing query parameters, unescaped (those long enough to mask)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return ()
    found = [unquote(password)] if password else []
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    found += [value for name, value in pairs if _secret_param(name)]
    return tuple(dict.fromkeys(s for s in found if len(s) >= MIN_SECRET))


def _secret_param(name: str) -> bool:
    lowered = name.lower().replace("-", "_")
    return lowered in SECRET_PARAMS or lowered.endswith(("_key", "_token", "_secret"))


def redacted_command(command: str) -> str:
    """``command`` as it may be printed: its program and option names as written, every other
    argument (an option's value, a word of its own: any may be a password) as ``***``."""
    return " ".join(shown for shown, _ in _command_words(command)) if command.strip() else ""


def command_secrets(command: str) -> tuple[str, ...]:
    """The secrets ``command``'s own messages may repeat, to be masked there: its options'
    values (``--password x``, ``--password=x``, ``-px``) and the words that look like a key.
    Its other words stay readable there (``az account get-access-token``)."""
    found = (secret for _, secret in _command_words(command) if secret)
    return tuple(dict.fromkeys(s for s in found if len(s) >= MIN_SECRET))


def _command_words(command: str) -> list[tuple[str, str | None]]:
    """Each word of ``command`` as (how it is printed, the secret it may be or None)."""
    try:
        words = shlex.split(command)
    except ValueError:  # an unclosed quote: nothing of it is shown
        return [(MASK, command)]
    out = [(shlex.quote(words[0]), None)] if words else []
    option_before = False
    for word in words[1:]:
        name, equals, value = word.partition("=")
        if _OPTION.fullmatch(name) and (len(name) == 2 or name.startswith("--")):
            out.append((f"{name}={MASK}", value) if equals else (name, None))
            option_before = not equals
            continue
        if word.startswith("-") and _OPTION.fullmatch(word[:2]):  # -pVALUE
            out.append((MASK, word[2:]))
        else:
            out.append((MASK, word if option_before or looks_like_key(word) else None))
        option_before = False
    return out


def is_secret_header(name: str) -> bool:
    """Whether a header named ``name`` carries credentials (api-key, x-goog-api-key, Cookie,
    Authorization, x-auth-token...)."""
    lowered = name.lower()
    return lowered in SECRET_HEADERS or any(word in lowered for word in _SECRET_WORDS)


def redacted_headers(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` with the values of credential headers replaced by ``***``."""
    return {name: MASK if is_secret_header(name) else value for name, value in headers.items()}


def looks_like_key(value: str) -> bool:
    """Whether ``value``, written where a variable's name belongs, looks like a key itself: a
    key's prefix, or long and random-looking (mixed case and digits, or many digits)."""
    if value.startswith(_KEY_PREFIXES):
        return True
    if len(value) < 20 or value.count("_") > 2 or _entropy(value) < 3.5:
        return False
    digits = sum(c.isdigit() for c in value)
    mixed = not value.isupper() and not value.islower()
    return (mixed and digits >= 2) or digits >= len(value) // 4


def _entropy(text: str) -> float:
    """Shannon entropy of ``text`` in bits a character."""
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())
