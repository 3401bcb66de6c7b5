#!/usr/bin/env bash
# Static checks of the Ansible collection with Ansible's own tools: `ansible-lint` on the collection plus
# inventory/ (configured by .ansible-lint), and `ansible-test sanity` on a copy of ansible/ placed at
# ansible_collections/vgpuadm/vgpu (ansible-test's required layout, inside a throw-away git repo).
# Usage: tests/ansible/sanity.sh [lint|sanity|all]   (default all; scripts/test.sh runs `lint`, ~25 s)
#
# Both tools live in their own venv under ${VGPUADM_LINT_VENV:-~/.cache/vgpuadm/ansible-lint-venv}, so the
# project's venv keeps its pinned packages. ansible-test (not in CI) bootstraps pip in each test venv from
# https://ci-files.testing.ansible.com/ansible-test/get-pip-24.2.py; without that host, put an equivalent script at
# ~/.ansible/test/cache/get_pip_24_2.py first (it only has to install pip==24.2 into sys.executable).
set -euo pipefail
what=${1:-all}
case "$what" in lint|sanity|all) ;; *) echo "usage: $0 [lint|sanity|all]" >&2; exit 2 ;; esac
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${VGPUADM_LINT_VENV:-$HOME/.cache/vgpuadm/ansible-lint-venv}"
core="$("$repo/.venv/bin/python" -c 'import ansible; print(ansible.__version__)')"
if [ ! -x "$venv/bin/ansible-lint" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "ansible-core==$core" "ansible-lint==26.10.1"  # pinned: CI must not change under us
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
status=0

if [ "$what" != lint ]; then
  coll="$work/ansible_collections/vgpuadm/vgpu"
  mkdir -p "$(dirname "$coll")"
  cp -r "$repo/ansible" "$coll"
  git -C "$coll" init -q && git -C "$coll" add -A
  echo "== ansible-test sanity (ansible-core $core)"
  (cd "$coll" && "$venv/bin/ansible-test" sanity --python 3.11 --requirements --skip-test pslint \
    --skip-test shellcheck) || status=1
fi

if [ "$what" != sanity ]; then
  proj="$work/lint"
  mkdir -p "$proj/collections/ansible_collections/vgpuadm"
  cp -r "$repo/ansible" "$proj/collections/ansible_collections/vgpuadm/vgpu"
  cp -r "$repo/inventory" "$proj/inventory"
  cp "$repo/.ansible-lint" "$proj/"
  git -C "$proj" init -q
  echo "== ansible-lint (ansible-core $core)"
  (cd "$proj" && ANSIBLE_COLLECTIONS_PATH="$proj/collections" "$venv/bin/ansible-lint" --offline --format pep8 \
    --nocolor inventory collections/ansible_collections/vgpuadm/vgpu) || status=1
fi
exit $status
