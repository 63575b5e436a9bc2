"""A run: set-up and signals (runner), the options and their defaults, the loop over jobs
(engine, turns), the outputs, the workers and their job feed, the response cache in a run,
the budget's set-up (money), --otlp's span process (telemetry), --dry-run's plan and
validate's checks; the pool a program calls (pool).

``rrcli.run`` names both this package and the library's ``run`` function: once any module of the
package is imported, Python binds the package to the name ``run`` of ``rrcli``, so the package
itself is callable and calls ``runner.run``. The runner is imported by name when first called,
so importing one module of the package (the options) never loads the runner.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


class _RunPackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``rrcli.run(profile, options)``: ``rrcli.run.runner.run``."""
        return importlib.import_module("rrcli.run.runner").run(*args, **kwargs)


sys.modules[__name__].__class__ = _RunPackage
