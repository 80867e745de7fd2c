"""YAML configuration: defaults, loading, strict validation with one-line errors.

Every key has a default here, so a config file only states what it changes. Unknown keys and
wrong types are errors naming the key and the file: a typo must not silently do nothing.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any

# diff: a relative change of the median step smaller than this is never called significant (the CLI's
# --min-change default; here so that building the parser imports no analysis stack). Half the 10% change a
# diff must still call: at 10%, a real 10% change (measured +9.0% to +10.0%) sat on the threshold
DIFF_MIN_CHANGE = 0.05

DEFAULTS: dict[str, Any] = {
    "out": "distprof_out",
    "window": "steps",          # steps: analyse the union of ProfileSteps; all: the whole trace
    "collector": {
        "enabled": True,        # record ranges into the per-rank native file
        "nvtx": True,           # emit NVTX ranges (seen by nsys)
        "merge_timeout_s": 120.0,   # without MPI: how long rank 0 waits for the other ranks' files
        "hang_dump_s": None,    # a step running longer than this (s) writes OUT/hang_rank<r>.json; None: off
    },
    "phases": {
        "dataloader": "Dataloader",   # name of the phase recorded around each next() of prof.loader
        "non_compute": ["Dataloader"],  # phases that are not computation on host-only traces
    },
    "communication": {
        "kernel_prefixes": ["nccl"],  # GPU kernels whose name starts with one of these are communication
        "comm_kernels": [],   # your own communication kernels: regexes searched in the kernel name, each
                              # optionally KIND=REGEX (KIND: allreduce, alltoall, ...); the known libraries'
                              # (DeepEP, NVSHMEM, symmetric memory, custom all-reduce, ...) need none
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
        "straggler_min_ns": 100_000,   # a straggler costs the others at least this much per step
        "straggler_min_step_fraction": 0.05,   # ... and at least this share of the median step time
        "straggler_min_late_share": 0.75,   # a straggler is late in at least this share of the steps
        "straggler_min_lead": 2.0,   # ... and costs at least this many times the runner-up rank
        "straggler_min_onset_steps": 2,   # or slow since a change point, with at least this many steps since
        "late_min_ns": 20_000,   # per collective: a last arrival counts when this far (plus clock
                                 # uncertainty) after the second-latest one
        "max_rows": 200,    # per-collective and per-step rows kept in summary.json (plus aggregates)
    },
    "hardware": {
        "peak_busbw_gbps": None,   # the link's peak bus bandwidth (GB/s, nccl-tests busbw); None: not known
        "gpus_per_node": None,     # ranks per node when the traces name no hosts (rank // this = node)
        "slow_collective_share": 0.5,   # a Collectives row below this share of the peak: finding
        "peak_tflops": None,       # the device's peak TFLOPS (dense, the training dtype): MFU; None: no MFU
    },
    "input": {
        # None: one eighth of this machine's memory (a Kineto JSON takes about 4x its size to merge)
        "max_file_mb": None,            # input files above this size are refused (one line, no read)
        "max_uncompressed_mb": None,    # a .gz input that expands beyond this is refused while streaming
    },
    "diagnosis": {
        "dataloader_share": 0.20,   # Dataloader above this share of ProfileStep: finding
        "gpu_idle_share": 0.20,     # GPU idle above this share of the window: finding
        "memory_creep_share": 0.01,     # per-step memory peaks growing every step by more than this share: finding
        "memory_outlier_share": 0.20,   # a rank's memory peak above the median of the ranks by this share: finding
        "expert_imbalance_ratio": 1.5,  # a rank's all-to-all load this many x the other ranks' median: finding
        "exposed_allgather_share": 0.05,  # all-gathers no computation hides above this share of a rank's window
    },
    "live": {
        "every_steps": 0,           # a rolling Distributed Summary every this many committed steps; 0: off
        "prometheus_port": None,    # rank 0 serves /metrics on this port; None: off
        "prometheus_addr": "127.0.0.1",  # the address /metrics binds (loopback; 0.0.0.0 or :: for a scraper)
        "textfile": None,           # node-exporter textfile (.prom) rewritten each window; None: off
        "node": "{host}",           # ranks whose node name (this, {rank}/{host} filled in) is equal are one node:
                                    # one side process there reduces their files and sends rank 0 the results
        "view_addr": None,          # where the other nodes reach rank 0's view; None: rank 0's host addresses
        "priority": "idle",         # idle: the side processes use only idle CPU (SCHED_IDLE); nice: nice 5
        "alerts": {                 # straggler / step-time / exposed-communication alerts (false: none)
            "enabled": True,
            "windows_in_a_row": 2,          # a straggler named (or a figure above) in this many windows in a row
            "straggler_min_cost_share": 0.10,   # ... at a cost of at least this share of the step
            "baseline_windows": 3,          # a figure's baseline: the median of its previous this many windows
            "min_baseline_windows": 2,      # no jump alert before this many windows of baseline
            "jump_share": 0.25,             # a jump: above the baseline by this share of it ...
            "jump_noise": 3.0,              # ... and by this many times the baseline's noise (1.4826 MAD)
            "exposed_floor_share": 0.10,    # ... and, for exposed communication, by this share of the step
        },
    },
    "demo": {
        "ranks": 4,
        "steps": 12,
        "comm": "overlap",          # overlap | serial
        "straggler": "",            # "RANK:MS" or "RANK:MS@STEP", e.g. "2:50", "1:50@12"
        "layers": 4,
        "width": 512,
        "batch": 256,
        "kernel_ms": 0.0,           # > 0: each matmul is followed by this wait, as a host waits for its GPU
    },
}


CHOICES = {"window": ("steps", "all"), "demo.comm": ("overlap", "serial"), "live.priority": ("idle", "nice")}
# numeric keys and their allowed closed range (None: unbounded); a value outside is an error. Counts
# that size work or memory are bounded above: pingpong_samples 1e9 hung the demo's start
RANGES: dict[str, tuple[float | None, float | None]] = {
    "collector.merge_timeout_s": (0, None), "clock.pingpong_samples": (1, 10_000),
    "clock.refine_min_collectives": (0, None), "checks.overlap_warn_ratio": (0, 1),
    "skew.straggler_min_ns": (0, None), "skew.straggler_min_step_fraction": (0, 1),
    "skew.straggler_min_late_share": (0, 1), "skew.straggler_min_lead": (0, None),
    "skew.straggler_min_onset_steps": (1, None), "skew.max_rows": (0, 1_000_000),
    "skew.late_min_ns": (0, None), "hardware.slow_collective_share": (0, 1),
    "input.max_file_mb": (1, None), "input.max_uncompressed_mb": (1, None),
    "diagnosis.dataloader_share": (0, 1), "diagnosis.gpu_idle_share": (0, 1),
    "diagnosis.memory_creep_share": (0, None), "diagnosis.memory_outlier_share": (0, None),
    "diagnosis.expert_imbalance_ratio": (1, None), "diagnosis.exposed_allgather_share": (0, 1),
    "demo.ranks": (1, 1024), "demo.steps": (1, 1_000_000), "demo.layers": (1, 1000), "demo.width": (1, 65_536),
    "demo.batch": (1, 1_000_000), "demo.kernel_ms": (0, 60_000), "live.every_steps": (0, None),
    "live.prometheus_port": (1, 65535),
    "live.alerts.windows_in_a_row": (1, 1000), "live.alerts.straggler_min_cost_share": (0, 1),
    "live.alerts.baseline_windows": (1, 1000), "live.alerts.min_baseline_windows": (1, 1000),
    "live.alerts.jump_share": (0, None), "live.alerts.jump_noise": (0, None), "live.alerts.exposed_floor_share": (0, 1),
}
# keys whose default is None (not known): a number of this type, or null; must be > 0
NULLABLE: dict[str, type] = {"hardware.peak_busbw_gbps": float, "hardware.gpus_per_node": int,
                             "hardware.peak_tflops": float, "input.max_file_mb": int,
                             "input.max_uncompressed_mb": int, "live.prometheus_port": int, "live.textfile": str,
                             "collector.hang_dump_s": float, "live.view_addr": str}
NON_EMPTY_ITEMS = ("communication.kernel_prefixes",)  # an empty prefix would match every kernel
NON_EMPTY_TEXT = ("live.prometheus_addr", "live.node")  # an empty bind address is every interface
# a mapping that may be given as a bool: the bool sets this key of it (``live: {alerts: false}``)
BOOL_SHORTHAND = {"live.alerts": "enabled"}
INT_LIMIT = 2 ** 63 - 1  # an integer beyond int64 overflowed float() or numpy deep in the analysis
_EXPONENT = re.compile(r"([-+]?)(\d+)(?:\.(\d*))?[eE]([-+]?)(\d+)")


class ConfigError(ValueError):
    """A config problem, already phrased as the one line the user sees."""


def _merge(base: dict, override: dict, where: str, source: str) -> dict:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        path = f"{where}{key}"
        if key not in base:
            raise ConfigError(f"{source}: unknown key '{path}' (known: {', '.join(sorted(base))})")
        default = base[key]
        if isinstance(default, dict) and path in BOOL_SHORTHAND and isinstance(value, bool):
            value = {BOOL_SHORTHAND[path]: value}
        if isinstance(default, dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: key '{path}' must be a mapping, got {type(value).__name__}")
            merged[key] = _merge(default, value, path + ".", source)
            continue
        if path in NULLABLE:
            merged[key] = _nullable(path, value, source)
            continue
        expected = (int, float) if isinstance(default, float) else type(default)
        if isinstance(value, bool) and not isinstance(default, bool):
            raise ConfigError(f"{source}: key '{path}' must be {type(default).__name__}, got bool")
        if not isinstance(value, expected):
            raise ConfigError(f"{source}: key '{path}' must be {type(default).__name__}, "
                              f"got {type(value).__name__} ({value!r}){_number_hint(value, expected)}")
        if isinstance(default, list) and not all(isinstance(item, str) for item in value):
            raise ConfigError(f"{source}: key '{path}' must be a list of strings")
        _check_value(path, value, source)
        if path in CHOICES and value not in CHOICES[path]:
            raise ConfigError(f"{source}: key '{path}' must be one of {', '.join(CHOICES[path])}, got {value!r}")
        merged[key] = value
    return merged


def _nullable(path: str, value: Any, source: str) -> Any:
    """A key that may be null (unknown): a positive number of its type, or None. A peak of 0 or a
    negative node size would make every figure against it meaningless."""
    if value is None:
        return None
    kind = NULLABLE[path]
    if kind is str:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{source}: key '{path}' must be a non-empty string or null, got "
                              f"{type(value).__name__} ({value!r})")
        return value
    allowed = (int, float) if kind is float else (int,)
    if isinstance(value, bool) or not isinstance(value, allowed):
        what = "a number" if kind is float else "an integer"
        raise ConfigError(f"{source}: key '{path}' must be {what} > 0 or null, got {type(value).__name__} "
                          f"({value!r}){_number_hint(value, allowed)}")
    _check_value(path, value, source)
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{source}: key '{path}' must be > 0 or null, got {value!r}")
    _check_value(path, value, source)
    return float(value) if kind is float else int(value)


def _check_value(path: str, value: Any, source: str) -> None:
    """Ranges and non-empty entries: a negative count or a ratio of 5 must not silently do nonsense."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{source}: key '{path}' must be a finite number, got {value!r}")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT_LIMIT:
        # 1 and 400 zeros: OverflowError in float() or numpy deep in the analysis
        raise ConfigError(f"{source}: key '{path}' is too large: an integer of {len(str(abs(value)))} digits "
                          f"(at most {INT_LIMIT}, about 9.2e18); give the real value")
    low, high = RANGES.get(path, (None, None))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise ConfigError(f"{source}: key '{path}' must be {bounds}, got {value!r}")
    if path in NON_EMPTY_TEXT and isinstance(value, str) and not value.strip():
        raise ConfigError(f"{source}: key '{path}' must not be empty")
    if path == "communication.comm_kernels":
        _check_patterns(path, value, source)
    if path in NON_EMPTY_ITEMS and isinstance(value, list) and any(item == "" for item in value):
        raise ConfigError(f"{source}: key '{path}' must not hold an empty string (it would match everything)")


def _check_patterns(path: str, value: list, source: str) -> None:
    """Each entry a regex that compiles (and not the empty one, which would take every kernel)."""
    import re

    from .sources.comm_kernels import user_pattern
    for entry in value:
        try:
            _, pattern = user_pattern(entry)
        except re.error as error:
            raise ConfigError(f"{source}: key '{path}': {entry!r} is not a regular expression ({error})") from None
        if pattern.search("") is not None:
            raise ConfigError(f"{source}: key '{path}': {entry!r} matches every kernel name")


def _number_hint(value: Any, expected: tuple | type) -> str:
    """Why a number in exponent form came as text, and how to write it: YAML 1.1 (PyYAML) reads
    ``1.0e308`` or ``1e3`` as a string, a float there needs a dot and a signed exponent."""
    match = _EXPONENT.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        return ""
    sign, whole, fraction, exp_sign, exponent = match.groups()
    why = f": YAML 1.1 reads {value.strip()} as text (a float needs a dot and a signed exponent)"
    wanted = expected if isinstance(expected, tuple) else (expected,)
    if float in wanted:
        return f"{why}; write {sign}{whole}.{fraction or '0'}e{exp_sign or '+'}{exponent}"
    number = float(value)
    if math.isfinite(number) and number.is_integer() and abs(number) <= INT_LIMIT:
        return f"{why}, and this key is an integer: write {int(number)}"
    return f"{why}, and this key is an integer: write it in digits, e.g. 1000"


def _unique_key_loader() -> type:
    """A SafeLoader that refuses a key given twice in one mapping (YAML would keep the last
    silently). Built on first use: yaml is imported only when a config file is given."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):  # noqa: ANN001, ANN201 - PyYAML's signature
            seen: set = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, (str, int, float, bool)):
                    continue
                if key in seen:
                    raise ConfigError(f"duplicate key '{key}' at line {key_node.start_mark.line + 1}")
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def _parse(path: str | Path) -> Any:
    """The YAML document of a config file, every problem as a ConfigError naming the file."""
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise ConfigError(f"{source}: cannot read config ({error.strerror or error})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{source}: not UTF-8 text (byte 0x{raw[error.start]:02x} at offset {error.start})") \
            from None
    import yaml
    try:
        return yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 - a SafeLoader subclass
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    except RecursionError:  # PyYAML composes nested nodes recursively
        raise ConfigError(f"{source}: nested too deep to read (a distprof config is two levels: "
                          "a section, then its keys)") from None
    except ValueError as error:  # int() of more than 4300 digits (sys.int_info), a date like 2020-13-45
        detail = "a number of more than 4300 digits" if "digits" in str(error) else str(error)
        raise ConfigError(f"{source}: a value YAML cannot read ({detail}); give the real value") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{source}: not valid YAML{line}") from None


def load(path: str | Path | None = None, overrides: dict | None = None) -> dict:
    """Defaults, then the YAML file (if any), then keyword overrides; all validated."""
    config = copy.deepcopy(DEFAULTS)
    if path is not None:
        source = str(path)
        data = _parse(path)
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: top level must be a mapping of keys, got {type(data).__name__}")
        config = _merge(config, data, "", source)
    if overrides:
        config = _merge(config, overrides, "", "arguments")
    return config
