"""distprof: where the time goes across the ranks of a distributed training job."""

from . import config
from .annotate import comm, phase, range
from .profiler import Profiler

__version__ = "0.1.0"
__all__ = ["Profiler", "phase", "comm", "range", "config", "__version__"]
