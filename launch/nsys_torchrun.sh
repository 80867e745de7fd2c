#!/usr/bin/env bash
# Profile every rank of a torchrun job (this node) with Nsight Systems, then merge with distprof.
# torchrun starts `nsys profile` as each worker (--no-python), so there is one report per rank
# (DIR/rankK.nsys-rep, K = RANK), each exported to DIR/rankK.sqlite, then `distprof merge`
# writes DIR/summary. A failed job still gets its reports exported and merged.
#
#   launch/nsys_torchrun.sh --nproc N [--out DIR] [--trace cuda,nvtx,osrt] [--dry-run] -- train.py --your-args
#
#   --dry-run   print the commands instead of running them
#   env: PYTHON (python3, runs train.py), NSYS (nsys), DISTPROF (distprof), TORCHRUN (torchrun)
set -euo pipefail

usage() {
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}

nproc=""; out="nsys_reports"; trace="cuda,nvtx,osrt"; dry_run=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nproc|--nproc_per_node|-n) nproc="${2:?--nproc needs a number}"; shift 2 ;;
    --out|-o) out="${2:?--out needs a directory}"; shift 2 ;;
    --trace|-t) trace="${2:?--trace needs a list such as cuda,nvtx,osrt}"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage 0 ;;
    --) shift; break ;;
    *) echo "nsys_torchrun.sh: unknown option '$1' (put the training script after --)" >&2; exit 2 ;;
  esac
done
[[ -n "$nproc" && "$nproc" =~ ^[1-9][0-9]*$ ]] || { echo "nsys_torchrun.sh: --nproc N is required (a positive integer)" >&2; exit 2; }
[[ $# -gt 0 ]] || { echo "nsys_torchrun.sh: no training script after --" >&2; exit 2; }

# shellcheck source=launch/_tools.sh
source "$(dirname "${BASH_SOURCE[0]}")/_tools.sh"
nsys_bin="${NSYS:-nsys}"
distprof_bin="${DISTPROF:-$(tool_or_name distprof)}"
torchrun_bin="${TORCHRUN:-$(tool_or_name torchrun)}"

# nsys expands %q{RANK} from each worker's environment (torchrun sets RANK)
profile=("$torchrun_bin" --standalone --nproc_per_node "$nproc" --no-python
         "$nsys_bin" profile -t "$trace" -o "$out/rank%q{RANK}" --force-overwrite true "$python_bin" "$@")
script=nsys_torchrun.sh
ranks="$nproc"
required=("$nsys_bin" "$torchrun_bin")
# shellcheck source=launch/_nsys_export_merge.sh
source "$(dirname "${BASH_SOURCE[0]}")/_nsys_export_merge.sh"
status=0
nsys_export_merge || status=$?
exit "$status"
