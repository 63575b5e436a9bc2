"""rrcli: a command-line load-balancing runner for LLM APIs.

The library API is small: load a profile, read jobs, run them, summarize traces. The CLI
(``rrcli.cli``) is a thin layer over these.
"""

from __future__ import annotations

from rrcli.errors import ProfileError, ProviderError, RRCLIError, UsageError
from rrcli.profile import load_profile, validate_profile

__version__ = "0.1.0"

__all__ = [
    "ProfileError",
    "ProviderError",
    "RRCLIError",
    "UsageError",
    "__version__",
    "load_profile",
    "validate_profile",
]
