#!/usr/bin/env bash
# Profile every rank of an MPI job with Nsight Systems, then merge the reports with distprof.
# One report per rank (DIR/rankK.nsys-rep, K = OMPI_COMM_WORLD_RANK), each exported to
# DIR/rankK.sqlite, then `distprof merge` writes DIR/summary. A failed job still gets its
# reports exported and merged (the merge names the missing ranks); the job's status is returned.
#
#   launch/nsys_mpirun.sh -n N [--out DIR] [--trace cuda,nvtx,osrt] [--oversubscribe] [--dry-run] -- python train.py --your-args
#
#   --dry-run   print the commands instead of running them
#   env: PYTHON (python3), NSYS (nsys), DISTPROF (distprof) choose the programs
set -euo pipefail

usage() {
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}

ranks=""; out="nsys_reports"; trace="cuda,nvtx,osrt"; dry_run=0; extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n|--ranks) ranks="${2:?-n needs a number}"; shift 2 ;;
    --out|-o) out="${2:?--out needs a directory}"; shift 2 ;;
    --trace|-t) trace="${2:?--trace needs a list such as cuda,nvtx,osrt}"; shift 2 ;;
    --oversubscribe) extra+=(--oversubscribe --bind-to none); shift ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage 0 ;;
    --) shift; break ;;
    *) echo "nsys_mpirun.sh: unknown option '$1' (put the training command after --)" >&2; exit 2 ;;
  esac
done
[[ -n "$ranks" && "$ranks" =~ ^[1-9][0-9]*$ ]] || { echo "nsys_mpirun.sh: -n RANKS is required (a positive integer)" >&2; exit 2; }
[[ $# -gt 0 ]] || { echo "nsys_mpirun.sh: no training command after --" >&2; exit 2; }

# shellcheck source=launch/_tools.sh
source "$(dirname "${BASH_SOURCE[0]}")/_tools.sh"
nsys_bin="${NSYS:-nsys}"
distprof_bin="${DISTPROF:-$(tool_or_name distprof)}"
mpirun_bin="$(tool_or_name mpirun)"
[[ "$(id -u)" == 0 ]] && extra+=(--allow-run-as-root)

# nsys expands %q{VAR} from each rank's environment: one report per rank, named by its rank
profile=("$mpirun_bin" -n "$ranks" "${extra[@]}"
         "$nsys_bin" profile -t "$trace" -o "$out/rank%q{OMPI_COMM_WORLD_RANK}" --force-overwrite true "$@")
script=nsys_mpirun.sh
ranks="$ranks"
required=("$nsys_bin")
# shellcheck source=launch/_nsys_export_merge.sh
source "$(dirname "${BASH_SOURCE[0]}")/_nsys_export_merge.sh"
status=0
nsys_export_merge || status=$?
exit "$status"
