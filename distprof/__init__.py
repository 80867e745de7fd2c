"""distprof: where the time goes across the ranks of a distributed training job.

Names are resolved on first use (PEP 562), so ``import distprof`` costs almost nothing and
``distprof --help`` or a rank that only annotates never loads the analysis stack (pandas,
matplotlib): ``distprof.phase`` brings in the annotation API only, ``distprof.Profiler`` the
recorder, and the analyses load when a merge runs.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"
__all__ = ["Profiler", "Summary", "phase", "comm", "range", "config", "__version__"]

_FROM = {"phase": "annotate", "comm": "annotate", "range": "annotate", "Profiler": "profiler", "Summary": "results"}


def __getattr__(name: str):
    """Import what ``name`` needs when it is first asked for, then keep it as a plain attribute."""
    if name in _FROM:
        value = getattr(importlib.import_module(f".{_FROM[name]}", __name__), name)
    elif not name.startswith("__"):
        try:
            value = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
