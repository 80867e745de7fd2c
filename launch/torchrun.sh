#!/usr/bin/env bash
# Launch a training script with torchrun, one process per GPU of this node.
# Without MPI, every rank writes its native file and rank 0 merges them when all are complete.
#
#   launch/torchrun.sh --nproc N [--dry-run] -- train.py --your-args
set -euo pipefail

usage() {
  sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}

nproc=""; dry_run=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nproc|--nproc_per_node|-n) nproc="${2:?--nproc needs a number}"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage 0 ;;
    --) shift; break ;;
    *) echo "torchrun.sh: unknown option '$1' (put the training script after --)" >&2; exit 2 ;;
  esac
done
[[ -n "$nproc" && "$nproc" =~ ^[1-9][0-9]*$ ]] || { echo "torchrun.sh: --nproc N is required (a positive integer)" >&2; exit 2; }
[[ $# -gt 0 ]] || { echo "torchrun.sh: no training script after --" >&2; exit 2; }

# shellcheck source=launch/_tools.sh
source "$(dirname "${BASH_SOURCE[0]}")/_tools.sh"
torchrun_bin="$(tool_next_to torchrun torchrun.sh)" || exit 2
command=("$torchrun_bin" --standalone --nproc_per_node "$nproc" "$@")
if [[ $dry_run == 1 ]]; then
  printf '%q ' "${command[@]}"; echo
  exit 0
fi
exec "${command[@]}"
