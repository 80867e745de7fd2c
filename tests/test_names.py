from distprof.names import MAX_NAME_CHARS, base_name, is_step_name, short_name


def test_short_names_are_unchanged():
    assert short_name("ncclDevKernel_AllReduce") == "ncclDevKernel_AllReduce"
    assert short_name(42) == "42"


def test_long_names_keep_head_and_tail_within_limit():
    name = "void gemm<" + "x" * 100_000 + ">(float*)"
    short = short_name(name)
    assert len(short) == MAX_NAME_CHARS
    assert short.startswith("void gemm<") and short.endswith(">(float*)") and "…" in short
    for limit in (1, 2, 3, 10):
        assert len(short_name(name, limit)) == limit


def test_control_characters_do_not_break_lines():
    assert short_name("a\nb\tc") == "a b c"


def test_base_name_drops_pytorch_nvtx_call_suffixes():
    """PyTorch's emit_nvtx writes name[, seq = N][, op_id = N][, sizes = ...][, input_op_ids = ...]."""
    assert base_name("aten::to, seq = 12, op_id = 998") == "aten::to"
    assert base_name("aten::to, op_id = 998949") == "aten::to"
    assert base_name("aten::add, seq = 5") == "aten::add"
    assert base_name("aten::mm, seq = 3, op_id = 7, sizes = [[2, 3], [3, 4]], input_op_ids = [(5, 0)]") == "aten::mm"
    assert base_name("aten::add, seq = -1, op_id = 4") == "aten::add"
    # names that only look alike stay whole
    assert base_name("aten::to") == "aten::to" and base_name("my range, seq = x") == "my range, seq = x"
    assert base_name("a, op_id = 1b") == "a, op_id = 1b" and base_name(", seq = 1") == ", seq = 1"


def test_step_names():
    assert is_step_name("ProfilerStep#3") and is_step_name("ProfilerStep#120") and is_step_name("ProfileStep")
    assert not is_step_name("ProfilerStep#") and not is_step_name("ProfilerStep#3 (copy)")
    assert not is_step_name("## forward ##")
