"""Communication kernels that are not NCCL's (issue 55): the one table of known libraries, the
launched-by-a-communication-op rule, the user's ``communication.comm_kernels`` patterns, in both
readers, and every figure that follows from them, by construction."""

import json

import nsys_fixtures as fx
import pytest
from conftest import run_cli
from kineto_fixtures import GEMM, NCCL_ALLREDUCE, KinetoTrace

from distprof import config as config_module
from distprof import events as ev
from distprof.sources import comm_kernels, kineto, nsys

# kernel names as the traces show them (demangled, with template and parameter lists); the DeepEP ones
# as DeepSeek's published EP64 profile names them
DEEPEP_DISPATCH = "void dpsk::ep::internode::dispatch<false, 8, false, 8>(int4*, float*, long*, float*)"
DEEPEP_COMBINE = "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*, bool*)"
DEEPEP_NOTIFY = "void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*, int)"
DEEPEP_LAYOUT = "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*)"
UNKNOWN_COMM = "void mylib::exchange_kernel<4>(float*, int)"
COPY = "void at::native::vectorized_elementwise_kernel<4, at::native::CopyFunctor<float> >(int)"


@pytest.mark.parametrize(("name", "family", "kind"), [
    (DEEPEP_DISPATCH, "DeepEP", ev.ALLTOALL),
    (DEEPEP_COMBINE, "DeepEP", ev.ALLTOALL),
    ("void deep_ep::internode_ll::dispatch<true, false, 7168>(void*, float*)", "DeepEP", ev.ALLTOALL),
    ("void deep_ep::legacy::intranode::combine<__nv_bfloat16, 8, 768, 0>(int4*)", "DeepEP", ev.ALLTOALL),
    ("void deep_ep::intranode::barrier<8>(int**, int)", "DeepEP", ev.BARRIER),
    (DEEPEP_NOTIFY, "DeepEP", ev.OTHER_COMM),
    ("void (anonymous namespace)::multimem_all_reduce_kernel<float, 16>(float*)", "torch symmetric memory",
     ev.ALLREDUCE),
    ("void (anonymous namespace)::two_shot_all_reduce_kernel<bf16, 8, 4, false>(bf16**)", "torch symmetric memory",
     ev.ALLREDUCE),
    ("c10d::symmetric_memory::barrier_kernel(unsigned int**, int, int, int)", "torch symmetric memory", ev.BARRIER),
    ("void vllm::cross_device_reduce_1stage<half, 8>(vllm::RankData*, vllm::RankSignals)", "custom all-reduce",
     ev.ALLREDUCE),
    ("void tensorrt_llm::kernels::oneShotAllReduceKernel<half, 8>(AllReduceParams)", "TensorRT-LLM", ev.ALLREDUCE),
    ("void userbuffers_fp16_sum_inplace_gpu_rr_rs<4>(int, int, int)", "Transformer Engine userbuffers",
     ev.REDUCE_SCATTER),
    ("void nvshmemi_alltoall_on_stream_kernel<float>(int, float*)", "NVSHMEM", ev.ALLTOALL),
    ("mscclKernel_AllReduce_Sum_f32_LL128(ncclDevComm*)", "MSCCL", ev.ALLREDUCE),
])
def test_known_families_by_their_real_kernel_names(name, family, kind):
    known = comm_kernels.classify([name], config_module.DEFAULTS)
    assert known.is_comm.tolist() == [True]
    assert known.rule.tolist() == [f"{family} kernel"]
    assert ev.COLLECTIVE_KINDS[known.kind_code[0]] == kind


@pytest.mark.parametrize("name", [
    DEEPEP_LAYOUT,  # computes the per-rank token counts locally
    "void at::native::vectorized_elementwise_kernel<4, at::native::nvshmem_like_functor>(int)",  # a type, not a kernel
    "void cutlass::Kernel<cutlass_80_tensorop_dispatch_combine_gemm>(Params)",
    GEMM, COPY,
])
def test_names_that_only_look_like_communication_are_computation(name):
    assert comm_kernels.classify([name], config_module.DEFAULTS).is_comm.tolist() == [False]


def test_bare_name_drops_template_and_parameter_lists():
    assert comm_kernels.without_arguments(DEEPEP_COMBINE) == "void dpsk::ep::internode::combine"
    assert comm_kernels.without_arguments("void (anonymous namespace)::k<a<b>>::f<x>(int (*)(int))") == \
        "void (anonymous namespace)::k::f"


def _ep_rank(path, rank: int = 0):
    """One step, [0, 1_000_000) ns on the CPU, of an expert-parallel rank: compute on stream 7, DeepEP
    on stream 27 beside its own layout kernel, one NCCL all-reduce, and on stream 31 an unknown kernel
    launched straight from record_param_comms (a copy launched by aten::copy_ inside it runs on stream 7).

    stream 7 compute:     [100_000, 400_000) [500_000, 900_000)
    stream 27 compute:    [250_000, 260_000) (layout: the library's helper on its own stream)
    stream 27 DeepEP:     dispatch [300_000, 600_000), notify [650_000, 700_000), combine [800_000, 950_000)
    stream 13 NCCL:       [960_000, 990_000)
    stream 31 unknown:    [700_000, 750_000) launched by record_param_comms -> communication
    stream 7 copy:        [760_000, 770_000) launched by aten::copy_ inside it -> computation
    communication = 300 + 50 + 150 + 30 + 50 = 580_000; computation = 300 + 400 = 700_000 (the layout and
    the copy run inside the GEMMs' time: the union counts them once)
    overlap: dispatch with [300,400)+[500,600) = 200_000; combine with [800,900) = 100_000; the unknown
    [700,750) with [500,900): 50_000; notify [650,700): 50_000 -> 400_000
    """
    trace = KinetoTrace(rank=rank, world_size=2)
    trace.step(1, 0, 1_000_000)
    trace.kernel(GEMM, 100_000, 400_000, stream=7, launch_ns=10_000)
    trace.kernel(GEMM, 500_000, 900_000, stream=7, launch_ns=20_000)
    trace.kernel(DEEPEP_LAYOUT, 250_000, 260_000, stream=27, launch_ns=30_000)
    trace.kernel(DEEPEP_DISPATCH, 300_000, 600_000, stream=27, launch_ns=40_000)
    trace.kernel(DEEPEP_NOTIFY, 650_000, 700_000, stream=27, launch_ns=50_000)
    trace.kernel(DEEPEP_COMBINE, 800_000, 950_000, stream=27, launch_ns=60_000)
    trace.cpu_op("record_param_comms", 70_000, 90_000, **{"Collective name": "all_to_all"})
    trace.kernel(UNKNOWN_COMM, 700_000, 750_000, stream=31, launch_ns=72_000)
    trace.cpu_op("aten::copy_", 80_000, 85_000)
    trace.kernel(COPY, 760_000, 770_000, stream=7, launch_ns=81_000)
    trace.cpu_op("nccl:all_reduce", 95_000, 98_000, cat="user_annotation")
    trace.kernel(NCCL_ALLREDUCE, 960_000, 990_000, stream=13, launch_ns=96_000)
    return trace.write(path)


def test_kineto_rows_carry_their_rule(tmp_path):
    [trace] = kineto.read(_ep_rank(tmp_path / "rank0.json"), config_module.DEFAULTS)
    frame = trace.events.to_frame()
    kernels = frame[frame["kind"].astype(str) == ev.KERNEL]
    by_name = {name: (category, rule, kind) for name, category, rule, kind in
               zip(kernels["name"], kernels["category"], kernels["comm_rule"], kernels["collective"])}
    assert by_name[DEEPEP_DISPATCH] == (ev.COMMUNICATION, "DeepEP kernel", ev.ALLTOALL)
    assert by_name[DEEPEP_LAYOUT][:2] == (ev.COMPUTE, "")
    assert by_name[UNKNOWN_COMM][:2] == (ev.COMMUNICATION, comm_kernels.RULE_LAUNCHED)
    assert by_name[COPY][:2] == (ev.COMPUTE, "")  # launched by aten::copy_, not by the collective
    assert by_name[NCCL_ALLREDUCE] == (ev.COMMUNICATION, "nccl* kernel", ev.ALLREDUCE)


def test_figures_lanes_and_placement_of_an_expert_parallel_rank(tmp_path):
    _ep_rank(tmp_path / "rank0.json")
    result = run_cli("merge", str(tmp_path / "rank0.json"), "-o", str(tmp_path / "out"), "--width", "300")
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    [rank] = summary["ranks"]
    assert (rank["communication_ns"], rank["computation_ns"]) == (580_000, 700_000)
    assert rank["overlap_ns"] == 400_000
    rules = {lane["lane"]: lane["comm_rules"] for lane in rank["lanes"] if lane["communication_ns"]}
    assert sorted(rules.values()) == [["DeepEP kernel"], ["launched by a communication op"], ["nccl* kernel"]]
    # stream 27 runs 10 us of the library's own layout work beside 500 us of DeepEP: its own lane
    [check] = [c for c in summary["checks"] if c["check"] == "stream_placement"]
    assert check["status"] == "PASS", check
    # the Per rank table says why the lanes are communication
    [row] = [line for line in result.stdout.splitlines() if line.startswith("0 ") and "rank0.json" in line]
    assert "DeepEP kernel" in row and "nccl* kernel" in row


def test_a_user_pattern_makes_a_kernel_communication_in_both_readers(tmp_path):
    config = config_module.load(overrides={"communication": {"comm_kernels": ["alltoall=elementwise"]}})
    path = tmp_path / "rank.sqlite"
    fx.one_step_rank(fx.NsysExport()).write(path)
    [trace] = nsys.read(path, config)
    frame = trace.events.to_frame()
    row = frame[frame["name"] == "elementwise"].iloc[0]
    assert (row["category"], row["collective"], row["comm_rule"]) == \
        (ev.COMMUNICATION, ev.ALLTOALL, "communication.comm_kernels 'elementwise'")
    assert frame[frame["name"] == "gemm"].iloc[0]["category"] == ev.COMPUTE

    [trace] = kineto.read(_ep_rank(tmp_path / "rank0.json"), config_module.load(
        overrides={"communication": {"comm_kernels": ["cutlass"]}}))
    frame = trace.events.to_frame()
    gemm = frame[frame["name"] == GEMM]
    assert set(gemm["category"]) == {ev.COMMUNICATION} and set(gemm["comm_rule"]) == {
        "communication.comm_kernels 'cutlass'"}


def test_nsys_classifies_by_the_demangled_name_not_the_bare_one(tmp_path):
    """nsys's shortName is the bare function ("dispatch"); the demangled name says whose."""
    export = fx.one_step_rank(fx.NsysExport())
    export.kernel(4242, 0, 27, 31_000, 35_000, "dispatch", demangled=DEEPEP_DISPATCH, launch=(5_000, 5_100))
    path = tmp_path / "rank.sqlite"
    export.write(path)
    [trace] = nsys.read(path, config_module.DEFAULTS)
    frame = trace.events.to_frame()
    row = frame[frame["name"] == "dispatch"].iloc[0]
    assert (row["category"], row["collective"], row["comm_rule"]) == (ev.COMMUNICATION, ev.ALLTOALL, "DeepEP kernel")


def test_a_bad_pattern_is_one_line(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("communication:\n  comm_kernels: ['dispatch(']\n")
    result = run_cli("merge", str(_ep_rank(tmp_path / "rank0.json")), "--config", str(config), "-o",
                     str(tmp_path / "out"))
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0
    assert "comm_kernels" in result.stderr and "not a regular expression" in result.stderr


def test_nsys_kernel_launched_inside_a_communication_range_is_communication(tmp_path):
    """PyTorch's ops as NVTX ranges (emit_nvtx, record_function): a kernel no table names, launched with
    c10d::allreduce_ the innermost range around its call, is communication; a copy that aten::copy_
    launches inside the same collective stays computation."""
    export = fx.one_step_rank(fx.NsysExport())
    export.range(4242, 4_000, 9_000, "c10d::allreduce_")
    export.range(4242, 6_000, 7_000, "aten::copy_")
    export.kernel(4242, 0, 31, 31_000, 33_000, "mylib_exchange", launch=(4_500, 4_600))
    export.kernel(4242, 0, 31, 34_000, 35_000, "copy_kernel", launch=(6_200, 6_300))
    path = tmp_path / "rank.sqlite"
    export.write(path)
    [trace] = nsys.read(path, config_module.DEFAULTS)
    frame = trace.events.to_frame()
    exchange = frame[frame["name"] == "mylib_exchange"].iloc[0]
    assert (exchange["category"], exchange["comm_rule"]) == (ev.COMMUNICATION, comm_kernels.RULE_LAUNCHED)
    assert frame[frame["name"] == "copy_kernel"].iloc[0]["category"] == ev.COMPUTE
    assert frame[frame["name"] == "gemm"].iloc[0]["category"] == ev.COMPUTE  # launched in no collective
