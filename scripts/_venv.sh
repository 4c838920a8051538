# Sourced by scripts/demo and scripts/test: create (or reuse) the project virtualenv and install gpoeo into it.
# GPOEO_VENV picks another location; the install is skipped when pyproject.toml has not changed since the last one.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${GPOEO_VENV:-$repo_root/.venv}"
python="${PYTHON:-python3}"
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "gpoeo needs Python >= 3.11; set PYTHON=python3.11 or newer")'
if [ ! -x "$venv/bin/python" ]; then
    echo "creating virtualenv $venv" >&2
    "$python" -m venv "$venv"
fi
stamp="$venv/.gpoeo-installed"
want="$(cat "$repo_root/pyproject.toml" | sha256sum | cut -d' ' -f1) ${GPOEO_EXTRAS}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "installing gpoeo[${GPOEO_EXTRAS}] into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
    "$venv/bin/python" -m pip install --quiet -e "$repo_root[${GPOEO_EXTRAS}]" >&2
    echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
export DVC_NO_ANALYTICS=1
cd "$repo_root"
