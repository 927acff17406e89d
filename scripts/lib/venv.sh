# Sourced by the check scripts: a virtual environment under target/ holding Python
# packages from PyPI at pinned versions, made once and reused while the pins stay the same.
#   pinned_venv DIR "pkg==1 other==2" LABEL
pinned_venv() {
  local venv=$1 pins=$2 label=$3 start
  if [ "$(cat "$venv/pins" 2>/dev/null)" != "$pins" ]; then
    start=$(date +%s)
    rm -rf "$venv"
    python3 -m venv "$venv"
    # shellcheck disable=SC2086
    "$venv/bin/pip" install --quiet --disable-pip-version-check --root-user-action=ignore $pins
    echo "$pins" >"$venv/pins"
    echo "$label: Python packages installed in $(( $(date +%s) - start )) s"
  fi
}
