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
# The stamp holds the pyproject hash and the extras installed; an install with more extras serves fewer.
stamp="$venv/.gpoeo-installed"
hash="$(sha256sum < "$repo_root/pyproject.toml" | cut -d' ' -f1)"
had_hash="" had_extras=""
read -r had_hash had_extras 2>/dev/null < "$stamp" || true
missing=""
for extra in ${GPOEO_EXTRAS//,/ }; do
    case ",${had_extras:-}," in *",$extra,"*) ;; *) missing="$missing $extra" ;; esac
done
if [ "${had_hash:-}" != "$hash" ] || [ -n "$missing" ]; then
    extras=""
    for extra in ${had_extras//,/ } ${GPOEO_EXTRAS//,/ }; do  # keep what was installed, once each
        case ",$extras," in *",$extra,"*) ;; *) extras="${extras:+$extras,}$extra" ;; esac
    done
    echo "installing gpoeo${extras:+[$extras]} into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
    "$venv/bin/python" -m pip install --quiet -e "$repo_root${extras:+[$extras]}" >&2
    echo "$hash $extras" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
export DVC_NO_ANALYTICS=1
cd "$repo_root"
