"""YAML configuration: defaults, loading, strict validation with one-line errors.

Every key has a default here, so a config file only states what it changes. Unknown keys and
wrong types are errors naming the key and the file: a typo must not silently do nothing.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

DEFAULTS: dict[str, Any] = {
    "out": "distprof_out",
    "window": "steps",          # steps: analyse the union of ProfileSteps; all: the whole trace
    "collector": {
        "enabled": True,        # record ranges into the per-rank native file
        "nvtx": True,           # emit NVTX ranges (seen by nsys)
        "merge_timeout_s": 120.0,   # without MPI: how long rank 0 waits for the other ranks' files
    },
    "phases": {
        "dataloader": "Dataloader",   # name of the phase recorded around each next() of prof.loader
        "non_compute": ["Dataloader"],  # phases that are not computation on host-only traces
    },
    "communication": {
        "kernel_prefixes": ["nccl"],  # GPU kernels whose name starts with one of these are communication
    },
    "clock": {
        "pingpong_samples": 16,   # MPI ping-pong round trips per rank, at start and at stop
        "align": True,            # refine offsets by the ends of matched collectives (--no-align: off)
        "refine_min_collectives": 3,   # fewer matched collectives than this: keep the source's offset
    },
    "checks": {
        "overlap_warn_ratio": 0.10,   # separate comm lanes but overlap ratio below this: WARN
    },
    "skew": {
        "straggler_min_ns": 1_000_000,   # lateness below this (plus clock uncertainty) is noise
        "straggler_min_step_fraction": 0.15,   # ... and below this share of the median step time
        "straggler_min_late_share": 0.75,   # a straggler is late in at least this share of the steps
        "straggler_min_lead": 2.0,   # ... and late in total at least this many times the next-latest rank
        "max_rows": 200,    # per-collective and per-step rows kept in summary.json (plus aggregates)
    },
    "diagnosis": {
        "dataloader_share": 0.20,   # Dataloader above this share of ProfileStep: finding
        "gpu_idle_share": 0.20,     # GPU idle above this share of the window: finding
    },
    "demo": {
        "ranks": 4,
        "steps": 12,
        "comm": "overlap",          # overlap | serial
        "straggler": "",            # "RANK:MS", e.g. "2:50"
        "layers": 4,
        "width": 512,
        "batch": 256,
    },
}


CHOICES = {"window": ("steps", "all"), "demo.comm": ("overlap", "serial")}


class ConfigError(ValueError):
    """A config problem, already phrased as the one line the user sees."""


def _merge(base: dict, override: dict, where: str, source: str) -> dict:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        path = f"{where}{key}"
        if key not in base:
            raise ConfigError(f"{source}: unknown key '{path}' (known: {', '.join(sorted(base))})")
        default = base[key]
        if isinstance(default, dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: key '{path}' must be a mapping, got {type(value).__name__}")
            merged[key] = _merge(default, value, path + ".", source)
            continue
        expected = (int, float) if isinstance(default, float) else type(default)
        if isinstance(value, bool) and not isinstance(default, bool):
            raise ConfigError(f"{source}: key '{path}' must be {type(default).__name__}, got bool")
        if not isinstance(value, expected):
            raise ConfigError(f"{source}: key '{path}' must be {type(default).__name__}, "
                              f"got {type(value).__name__} ({value!r})")
        if isinstance(default, list) and not all(isinstance(item, str) for item in value):
            raise ConfigError(f"{source}: key '{path}' must be a list of strings")
        if path in CHOICES and value not in CHOICES[path]:
            raise ConfigError(f"{source}: key '{path}' must be one of {', '.join(CHOICES[path])}, got {value!r}")
        merged[key] = value
    return merged


def load(path: str | Path | None = None, overrides: dict | None = None) -> dict:
    """Defaults, then the YAML file (if any), then keyword overrides; all validated."""
    config = copy.deepcopy(DEFAULTS)
    if path is not None:
        source = str(path)
        try:
            text = Path(path).read_text()
        except OSError as error:
            raise ConfigError(f"{source}: cannot read config ({error.strerror or error})") from None
        import yaml  # only when a YAML file is given: a Profiler or --help without one skips the parser
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            line = f" at line {mark.line + 1}" if mark else ""
            raise ConfigError(f"{source}: not valid YAML{line}") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: top level must be a mapping of keys, got {type(data).__name__}")
        config = _merge(config, data, "", source)
    if overrides:
        config = _merge(config, overrides, "", "arguments")
    return config
