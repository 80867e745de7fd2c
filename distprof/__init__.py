"""distprof: where the time goes across the ranks of a distributed training job."""

__version__ = "0.1.0"
