# Sourced by nsys_mpirun.sh and nsys_torchrun.sh: run the profiling command, export every rank's
# report to DIR/rank<K>.sqlite, then `distprof merge` them (a failed job still gets what exists
# exported and merged; the merge names the missing ranks). Returns the job's status.
# Expects: script (name for messages), ranks, out, nsys_bin, distprof_bin, dry_run, profile
# (array: the job under nsys), required (array: programs that must exist to run for real).

nsys_export_merge() {
  local merge=("$distprof_bin" merge) rank report status=0 program
  for ((rank = 0; rank < ranks; rank++)); do merge+=("$out/rank$rank.sqlite"); done
  merge+=(-o "$out/summary")
  export_command() {  # sets export_cmd: export rank $1's report $2
    export_cmd=("$nsys_bin" export --type sqlite --force-overwrite true -o "$out/rank$1.sqlite" "$2")
  }

  if [[ $dry_run == 1 ]]; then
    printf '%q ' "${profile[@]}"; echo
    for ((rank = 0; rank < ranks; rank++)); do
      export_command "$rank" "$out/rank$rank.nsys-rep"
      printf '%q ' "${export_cmd[@]}"; echo
    done
    printf '%q ' "${merge[@]}"; echo
    return 0
  fi

  for program in "${required[@]}"; do
    local hint="pip install torch or set TORCHRUN"
    [[ "$program" == "$nsys_bin" ]] && hint="install Nsight Systems or set NSYS"
    command -v "$program" >/dev/null || { echo "$script: '$program' not found ($hint)" >&2; return 127; }
  done
  mkdir -p "$out"
  "${profile[@]}" || status=$?
  for ((rank = 0; rank < ranks; rank++)); do
    report="$out/rank$rank.nsys-rep"
    [[ -f "$report" ]] || report="$out/rank$rank.qdrep"   # nsys before 2021.4
    if [[ -f "$report" ]]; then
      export_command "$rank" "$report"
      "${export_cmd[@]}" || echo "$script: export of $report failed" >&2
    else
      echo "$script: no report for rank $rank (the merge will list it as missing)" >&2
    fi
  done
  "${merge[@]}"
  return "$status"
}
