"""The demo: a local control plane, replicas of the example app, a live view and a summary.

`example_app` is the application people copy; the names below drive `leasecron demo`. They
are imported on first use, so that starting the example app (a module of this package) does
not load the driver, and loading the CLI does not load the demo.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leasecron.demo._driver import MIN_SECONDS, DemoError, DemoOptions, run_demo
    from leasecron.demo._summary import Summary
    from leasecron.demo._view import format_summary

_EXPORTS = {
    "MIN_SECONDS": "leasecron.demo._driver",
    "DemoError": "leasecron.demo._driver",
    "DemoOptions": "leasecron.demo._driver",
    "run_demo": "leasecron.demo._driver",
    "Summary": "leasecron.demo._summary",
    "format_summary": "leasecron.demo._view",
}

__all__ = ["MIN_SECONDS", "DemoError", "DemoOptions", "Summary", "format_summary", "run_demo"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'leasecron.demo' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
