import pytest
from conftest import run_cli

from distprof import config as config_mod


def write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_defaults_and_override(tmp_path):
    config = config_mod.load(write(tmp_path, "checks:\n  overlap_warn_ratio: 0.25\ndemo:\n  ranks: 3\n"))
    assert config["checks"]["overlap_warn_ratio"] == 0.25
    assert config["demo"]["ranks"] == 3
    assert config["demo"]["steps"] == config_mod.DEFAULTS["demo"]["steps"]


@pytest.mark.parametrize("text, message", [
    ("collectr:\n  enabled: true\n", "unknown key 'collectr'"),
    ("collector:\n  enable: true\n", "unknown key 'collector.enable'"),
    ("demo:\n  ranks: four\n", "key 'demo.ranks' must be int"),
    ("demo:\n  ranks: true\n", "key 'demo.ranks' must be int, got bool"),
    ("communication:\n  kernel_prefixes: nccl\n", "key 'communication.kernel_prefixes' must be list"),
    ("checks: 3\n", "key 'checks' must be a mapping"),
    ("window: some\n", "key 'window' must be one of steps, all"),
    ("demo: [1, 2\n", "not valid YAML at line"),
    ("- a\n- b\n", "top level must be a mapping"),
])
def test_bad_config_is_one_line_naming_file_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(config_mod.ConfigError) as error:
        config_mod.load(path)
    assert str(path) in str(error.value) and message in str(error.value)
    assert "\n" not in str(error.value)


def test_float_key_accepts_int(tmp_path):
    assert config_mod.load(write(tmp_path, "checks:\n  overlap_warn_ratio: 1\n"))["checks"]["overlap_warn_ratio"] == 1


def test_shipped_configs_are_valid():
    from conftest import ROOT
    shipped = sorted((ROOT / "configs").glob("*.yaml"))
    assert {p.name for p in shipped} >= {"default.yaml", "demo.yaml", "nsys.yaml", "torchrun.yaml"}
    for path in shipped:
        assert config_mod.load(path)["out"]  # load raises, naming the key, on any bad entry


def test_cli_reports_bad_config_in_one_line(tmp_path):
    path = write(tmp_path, "demo:\n  rank: 2\n")
    result = run_cli("demo", "--config", str(path), "--dry-run")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "unknown key 'demo.rank'" in result.stderr and str(path) in result.stderr
    missing = run_cli("demo", "--config", str(tmp_path / "nope.yaml"), "--dry-run")
    assert missing.returncode == 2 and "cannot read config" in missing.stderr


def test_default_yaml_documents_every_key():
    """configs/default.yaml is the reference: it must state exactly the built-in defaults."""
    import yaml
    from conftest import ROOT
    documented = yaml.safe_load((ROOT / "configs" / "default.yaml").read_text())
    assert documented == config_mod.DEFAULTS


@pytest.mark.parametrize("text, message", [
    ("demo:\n  ranks: 2\n  ranks: 3\n", "duplicate key 'ranks' at line 3"),
    ("skew:\n  max_rows: -1\n", "key 'skew.max_rows' must be between 0 and 1000000"),
    ("clock:\n  refine_min_collectives: -3\n", "key 'clock.refine_min_collectives' must be at least 0"),
    ("clock:\n  pingpong_samples: -1\n", "key 'clock.pingpong_samples' must be between 1 and 10000"),
    ("clock:\n  pingpong_samples: 1000000000\n", "key 'clock.pingpong_samples' must be between 1 and 10000, "
     "got 1000000000"),
    ("clock:\n  pingpong_samples: 1e9\n", "key 'clock.pingpong_samples' must be int, got str"),
    ("demo:\n  width: 100000000\n", "key 'demo.width' must be between 1 and 65536"),
    ("checks:\n  overlap_warn_ratio: .nan\n", "key 'checks.overlap_warn_ratio' must be a finite number"),
    ("checks:\n  overlap_warn_ratio: 5\n", "key 'checks.overlap_warn_ratio' must be between 0 and 1"),
    ("communication:\n  kernel_prefixes: ['']\n", "key 'communication.kernel_prefixes' must not hold an empty"),
    ("input:\n  max_file_mb: 0\n", "key 'input.max_file_mb' must be at least 1"),
])
def test_bad_values_are_refused_naming_key_and_file(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(config_mod.ConfigError) as error:
        config_mod.load(path)
    assert str(path) in str(error.value) and message in str(error.value), str(error.value)
    assert "\n" not in str(error.value)


def test_config_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"demo:\n  straggler: \xff\xfe\n")
    result = run_cli("demo", "--config", str(path), "--dry-run")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0
    assert f"distprof: error: {path}: not UTF-8 text" in result.stderr
