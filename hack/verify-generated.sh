#!/usr/bin/env bash
# Fails when the committed generated files (CRD, RBAC, deepcopy) differ from
# what `make manifests generate` produces from the current sources. Compares
# the working tree before and after regeneration, so uncommitted but
# up-to-date changes pass; stale files are left regenerated for review.
#
# Usage: hack/verify-generated.sh PATH...   (run from the Makefile)
set -euo pipefail

cd "$(dirname "$0")/.."
before=$(mktemp -d)
trap 'rm -rf "${before}"' EXIT

for p in "$@"; do
  if [[ -e "${p}" ]]; then
    mkdir -p "${before}/$(dirname "${p}")"
    cp -R "${p}" "${before}/${p}"
  fi
done

make --no-print-directory manifests generate >/dev/null

stale=0
for p in "$@"; do
  if ! diff -ruN "${before}/${p}" "${p}"; then
    stale=1
  fi
done
if [[ ${stale} -ne 0 ]]; then
  echo "generated files were stale (diff above): they are now regenerated; review and commit them" >&2
  exit 1
fi
