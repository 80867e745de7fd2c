"""Which GPU kernels are communication, and by which rule: one table for every reader.

NCCL (and RCCL, which keeps NCCL's names) is found by the ``communication.kernel_prefixes`` of the
config. Much of the communication of today's large jobs runs in kernels that are not NCCL's: MoE
expert parallel dispatch/combine over DeepEP or NVSHMEM, torch symmetric memory, the custom
all-reduce kernels of inference and training stacks. ``KNOWN_FAMILIES`` names them, each pattern
taken from the kernel's definition in its project's source (docs/inputs.md lists where), with the
collective it performs where the name says it. A user's own kernels: ``communication.comm_kernels``
(regexes, each optionally ``KIND=REGEX``). A kernel no table knows is communication when the host
op that launched it is one (``launched_by_comm_op``, in the readers that see the launch).

Every rule has a label, kept per row (events ``comm_rule``) and per lane in summary.json, so a
kernel taken for communication by a wrong rule is visible.
"""

from __future__ import annotations

import functools
import re

import msgspec
import numpy as np

from .. import events as ev


class KernelFamily(msgspec.Struct, frozen=True):
    """Communication kernels of one library: a regex searched in the kernel's (demangled) name."""

    family: str
    pattern: str             # compiled on first use (``_compiled``): most merges read no GPU kernel
    kind: str = ""           # the collective, where the family's kernels all perform one
    kinds: tuple = ()        # (regex, kind) pairs for a family of several: first match wins


_EP_KINDS = ((r"dispatch|combine|a2a|alltoall", ev.ALLTOALL), (r"barrier|clean|sync", ev.BARRIER),
             (r"send", ev.SEND), (r"recv", ev.RECV))
KNOWN_FAMILIES = (
    # DeepEP (deepseek-ai/DeepEP): v1 csrc/kernels/{intranode,internode,internode_ll}.cu, moved under
    # deep_ep::legacy in EPv2; EPv2's JIT kernels in deep_ep::elastic; the hybrid-ep branch's hybrid_ep.
    # DeepSeek's published profiles name the namespace dpsk::ep. The layout kernel (get_dispatch_layout)
    # computes locally and is left out; notify/cached_notify exchange the token counts ("other").
    KernelFamily("DeepEP", (
        r"\b(?:deep_ep|dpsk::ep)::(?:legacy::)?(?:intranode|internode|internode_ll)::"
        r"(?:notify_dispatch|cached_notify\w*|dispatch|combine|barrier|clean_low_latency_buffer)\b"
        r"|\bdeep_ep::elastic::(?:hybrid_)?(?:dispatch|combine)_impl\b"
        r"|\bdeep_ep::elastic::(?:barrier|pp_send|pp_recv)_impl\b"
        r"|\bhybrid_ep::(?:dispatch_kernel|combine_kernel|device_sync_kernel|rdma_sync_kernel)\b"),
        kinds=_EP_KINDS),
    # NVSHMEM's device-side collectives (nvshmemi_*, and the *_on_stream_kernel launchers)
    KernelFamily("NVSHMEM", (r"\bnvshmemi?x?_\w+"
                             r"|\b(?:alltoall|barrier|broadcast|fcollect|rdxn|reducescatter|sync)"
                             r"_on_stream_kernel\w*"),
                 kinds=((r"barrier|sync", ev.BARRIER), (r"alltoall", ev.ALLTOALL), (r"fcollect", ev.ALLGATHER),
                        (r"reducescatter", ev.REDUCE_SCATTER), (r"rdxn|reduce", ev.ALLREDUCE),
                        (r"broadcast", ev.BROADCAST))),
    # torch symmetric memory (torch/csrc/distributed/c10d/symm_mem/: CUDASymmetricMemoryOps.cu and others)
    KernelFamily("torch symmetric memory", (
        r"\b(?:multimem_all_reduce|multimem_one_shot_all_reduce|multimem_all_gather|one_shot_all_reduce"
        r"|two_shot_all_reduce)_kernel\w*"
        r"|\bc10d::symmetric_memory::(?:barrier|multimem_barrier|put_signal|wait_signal)_kernel\b"
        r"|\bc10d::nvshmem_extension::(?:exchangeSplitAndOffset|allToAllV)\w*"
        r"|\bc10d::nccl_extension::lsa_\w+"),
        kinds=((r"all_reduce", ev.ALLREDUCE), (r"all_gather", ev.ALLGATHER), (r"alltoall|splitandoffset", ev.ALLTOALL),
               (r"barrier|signal", ev.BARRIER))),
    # custom all-reduce: vLLM and SGLang (csrc/custom_all_reduce.cuh: vllm::cross_device_reduce_*stage),
    # vLLM's quick reduce, SGLang's one-shot
    KernelFamily("custom all-reduce", (r"\bcross_device_reduce_[12]stage\b|\bquickreduce::allreduce\w*"
                                       r"|\bsglang::allreduce\w*"), kind=ev.ALLREDUCE),
    # TensorRT-LLM (cpp/tensorrt_llm/kernels/customAllReduceKernels.cu, communicationKernels/)
    KernelFamily("TensorRT-LLM", (
        r"\b(?:oneShot|twoShot)AllReduceKernel\b|\bar_fusion::allreduce_fusion_kernel\w*"
        r"|\breduce_fusion::\w*all_reduce\w*kernel\w*|\bmoe_a2a::moeA2A\w*Kernel\b"),
        kinds=((r"a2a", ev.ALLTOALL), (r"all_?reduce", ev.ALLREDUCE))),
    # Transformer Engine userbuffers (comm+GEMM overlap): _rs reduce-scatter, _ag all-gather, push/pull p2p
    KernelFamily("Transformer Engine userbuffers", (r"\buserbuffers_fp16_sum_inplace_gpu_\w+"
                                                    r"|\bkuserbuffers_\w+"),
                 kinds=((r"_rs", ev.REDUCE_SCATTER), (r"_ag", ev.ALLGATHER), (r"push|send", ev.SEND),
                        (r"pull|recv", ev.RECV), (r"sum", ev.ALLREDUCE))),
    # MSCCL++ (mscclpp::collective::*, executionKernel) and MSCCL/RCCL's MSCCL (mscclKernel_<Op>_...)
    KernelFamily("MSCCL++", r"\bmscclpp::\w+(?:::\w+)*"),
    KernelFamily("MSCCL", r"\bmscclKernel_\w+"),
)


@functools.cache
def _compiled() -> tuple[re.Pattern, tuple[tuple[KernelFamily, re.Pattern], ...]]:
    """The families' patterns compiled, once, where a kernel name is first classified: one pattern of
    them all (most kernels: one search rejects them) and each family's."""
    return (re.compile("|".join(f"(?:{family.pattern})" for family in KNOWN_FAMILIES)),
            tuple((family, re.compile(family.pattern)) for family in KNOWN_FAMILIES))
RULE_LAUNCHED = "launched by a communication op"
RULE_CONFIG = "communication.comm_kernels"
_KIND_PATTERN = re.compile(rf"^({'|'.join(kind for kind in ev.COLLECTIVE_KINDS if kind)})=(.+)$", re.DOTALL)


def user_pattern(text: str) -> tuple[str, re.Pattern]:
    """A ``communication.comm_kernels`` entry: ``REGEX`` or ``KIND=REGEX`` -> (kind or "", regex).
    Raises re.error where the regex does not compile (config.py says it in one line)."""
    match = _KIND_PATTERN.match(text)
    kind, pattern = (match.group(1), match.group(2)) if match else ("", text)
    return kind, re.compile(pattern)


def _user_patterns(config: dict) -> list[tuple[str, re.Pattern]]:
    return [user_pattern(text) for text in (config.get("communication") or {}).get("comm_kernels", [])]


class KernelClasses(msgspec.Struct, frozen=True):
    """Per distinct kernel name: communication or not, the rule that said so ("" where none) and the
    collective (COLLECTIVE_KINDS code; 0 where not known: the reader's other sources may say it)."""

    is_comm: np.ndarray
    rule: np.ndarray      # object array of labels
    kind_code: np.ndarray


def classify(names, config: dict) -> KernelClasses:
    """Each distinct kernel name once (never per row): the user's patterns first (they know their
    job), then the NCCL prefixes, then the known families."""
    from . import communication_prefixes
    prefixes = communication_prefixes(config)
    users = _user_patterns(config)
    is_comm = np.zeros(len(names), bool)
    rule = np.full(len(names), "", dtype=object)
    kind_code = np.zeros(len(names), np.int8)
    for index, name in enumerate(names):  # per distinct name
        found = _name_rule(str(name), prefixes, users)
        if found is not None:
            is_comm[index], rule[index] = True, found[0]
            kind = found[1] or ev.collective_kind(without_arguments(str(name))) or ev.OTHER_COMM
            kind_code[index] = ev.COLLECTIVE_KINDS.index(kind)
    return KernelClasses(is_comm, rule, kind_code)


def _name_rule(name: str, prefixes: tuple[str, ...], users: list) -> tuple[str, str] | None:
    """(rule label, collective kind or "") of one kernel name, None where no rule names it. The
    families are searched in the name without its template and parameter lists: a type is no kernel."""
    for kind, pattern in users:
        if pattern.search(name):
            return f"{RULE_CONFIG} {pattern.pattern!r}", kind
    prefix = next((prefix for prefix in prefixes if name.startswith(prefix)), None)
    if prefix is not None:
        return f"{prefix}* kernel", ""
    any_family, families = _compiled()
    if any_family.search(name) is None:  # most kernels: one search rejects them
        return None
    bare = None
    for family, pattern in families:
        if pattern.search(name) is None:  # nothing in the whole name: none in its bare part either
            continue
        bare = without_arguments(name) if bare is None else bare
        found = pattern.search(bare)
        if found:
            return f"{family.family} kernel", family.kind or _family_kind(family, found.group(0))
    return None


def without_arguments(name: str) -> str:
    """``void ns::k<(anonymous namespace)::T, 8>(float*, int)`` -> ``void ns::k``: the name without
    its template arguments and its trailing parameter list (balanced groups)."""
    if name.endswith(")"):
        depth = 0
        for position in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[position], 0)
            if depth == 0:
                name = name[:position]
                break
    if "<" not in name:
        return name
    kept, depth = [], 0
    for char in name:
        depth += {"<": 1, ">": -1}.get(char, 0) if char in "<>" else 0
        if depth == 0 and char != ">":
            kept.append(char)
        depth = max(depth, 0)
    return "".join(kept)


def _family_kind(family: KernelFamily, matched: str) -> str:
    lowered = matched.lower()
    return next((kind for words, kind in family.kinds if re.search(words, lowered)), "")


COMM_OP_PREFIXES = ("c10d::", "record_param_comms", "nccl:", "gloo:", "symm_mem::", "deep_ep::", "DeepEP")


def is_comm_op_name(name: str) -> bool:
    """A host op that is itself a communication op: a kernel it launches (with no other op
    between) performs its communication."""
    return name.startswith(COMM_OP_PREFIXES)
