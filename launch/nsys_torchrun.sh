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

python_bin="${PYTHON:-python3}"
nsys_bin="${NSYS:-nsys}"
distprof_bin="${DISTPROF:-distprof}"
torchrun_bin="${TORCHRUN:-torchrun}"

# nsys expands %q{RANK} from each worker's environment (torchrun sets RANK)
profile=("$torchrun_bin" --standalone --nproc_per_node "$nproc" --no-python
         "$nsys_bin" profile -t "$trace" -o "$out/rank%q{RANK}" --force-overwrite true "$python_bin" "$@")
merge=("$distprof_bin" merge)
for ((rank = 0; rank < nproc; rank++)); do merge+=("$out/rank$rank.sqlite"); done
merge+=(-o "$out/summary")

export_rank() {  # sets export_cmd: export rank $1's report $2 to DIR/rank$1.sqlite
  export_cmd=("$nsys_bin" export --type sqlite --force-overwrite true -o "$out/rank$1.sqlite" "$2")
}

if [[ $dry_run == 1 ]]; then
  printf '%q ' "${profile[@]}"; echo
  for ((rank = 0; rank < nproc; rank++)); do
    export_rank "$rank" "$out/rank$rank.nsys-rep"
    printf '%q ' "${export_cmd[@]}"; echo
  done
  printf '%q ' "${merge[@]}"; echo
  exit 0
fi

command -v "$nsys_bin" >/dev/null || { echo "nsys_torchrun.sh: '$nsys_bin' not found (install Nsight Systems or set NSYS)" >&2; exit 127; }
command -v "$torchrun_bin" >/dev/null || { echo "nsys_torchrun.sh: '$torchrun_bin' not found (pip install torch or set TORCHRUN)" >&2; exit 127; }
mkdir -p "$out"
status=0
"${profile[@]}" || status=$?
for ((rank = 0; rank < nproc; rank++)); do
  report="$out/rank$rank.nsys-rep"
  [[ -f "$report" ]] || report="$out/rank$rank.qdrep"   # nsys before 2021.4
  if [[ -f "$report" ]]; then
    export_rank "$rank" "$report"
    "${export_cmd[@]}" || echo "nsys_torchrun.sh: export of $report failed" >&2
  else
    echo "nsys_torchrun.sh: no report for rank $rank (the merge will list it as missing)" >&2
  fi
done
"${merge[@]}"
exit "$status"
