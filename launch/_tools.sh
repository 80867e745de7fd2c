# Sourced by the launch scripts: find the Python (and the tools installed next to it) that this
# checkout's distprof runs with, without an activated venv. Sets python_bin; tool_next_to NAME prints
# the tool next to that Python, else the one on PATH, else fails with one line naming what is missing.
#   order: $PYTHON, an activated venv ($VIRTUAL_ENV), the checkout's .venv, python3 on PATH
_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -n "${PYTHON:-}" ]]; then
  python_bin="$PYTHON"
elif [[ -n "${VIRTUAL_ENV:-}" && -x "$VIRTUAL_ENV/bin/python" ]]; then
  python_bin="$VIRTUAL_ENV/bin/python"
elif [[ -x "$_here/../.venv/bin/python" ]]; then
  python_bin="$(cd "$_here/.." && pwd)/.venv/bin/python"
else
  python_bin="python3"
fi

tool_next_to() {  # NAME [SCRIPT]: the tool beside python_bin, else on PATH, else a one-line error
  local dir; dir="$(dirname "$(command -v "$python_bin" 2>/dev/null || echo "$python_bin")")"
  if [[ -x "$dir/$1" ]]; then echo "$dir/$1"; return 0; fi
  if command -v "$1" >/dev/null 2>&1; then command -v "$1"; return 0; fi
  echo "${2:-launch}: no '$1' next to $python_bin nor on PATH: run the README's set-up command (python3 -m venv .venv && .venv/bin/pip install -e .) or set PYTHON to a Python that has distprof" >&2
  return 1
}

tool_or_name() {  # NAME: the tool beside python_bin, else NAME as it is (the caller checks it exists)
  local dir; dir="$(dirname "$(command -v "$python_bin" 2>/dev/null || echo "$python_bin")")"
  if [[ -x "$dir/$1" ]]; then echo "$dir/$1"; else echo "$1"; fi
}

python_command() {  # the training command, its leading python/python3 replaced by python_bin
  if [[ "${1:-}" == "python" || "${1:-}" == "python3" ]]; then shift; printf '%s\0' "$python_bin" "$@"
  else printf '%s\0' "$@"; fi
}
