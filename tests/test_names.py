from distprof.names import MAX_NAME_CHARS, short_name


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
