#!/usr/bin/env bash
# Pins k8s.io/kubernetes and every one of its staging modules.
#
# k8s.io/kubernetes replaces its staging modules (k8s.io/api, k8s.io/client-go,
# ...) with local directories, which a consumer cannot use. This script reads
# the replace block of kubernetes' own go.mod at the requested version and
# writes one replace per staging module, pinned to the matching v0.X.Y release,
# into our go.mod. Run it after changing K8S_VERSION; never edit the block by
# hand.
#
# Usage: hack/update-k8s-replaces.sh [v1.37.2]
set -euo pipefail

cd "$(dirname "$0")/.."

k8s_version=${1:-${K8S_VERSION:-v1.37.2}}
staging_version="v0.${k8s_version#v1.}"

# The go.mod of k8s.io/kubernetes at that version, from the module proxy.
kube_gomod=$(go mod download -json "k8s.io/kubernetes@${k8s_version}" |
  sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
if [[ ! -f "${kube_gomod}" ]]; then
  echo "cannot find go.mod of k8s.io/kubernetes@${k8s_version}" >&2
  exit 1
fi

# Lines like "	k8s.io/api => ./staging/src/k8s.io/api".
mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/src/.*#\1#p' "${kube_gomod}")
if [[ ${#staging[@]} -eq 0 ]]; then
  echo "no staging replaces found in ${kube_gomod}" >&2
  exit 1
fi

# Drop replaces of k8s.io staging modules this script wrote before, so a module
# that left staging does not stay pinned.
mapfile -t old < <(go mod edit -json | sed -n 's/^[[:space:]]*"Path": "\(k8s\.io\/[^"]*\)"$/\1/p' | sort -u)
drop=()
for m in "${old[@]}"; do
  drop+=("-dropreplace=${m}")
done

args=("-require=k8s.io/kubernetes@${k8s_version}")
for m in "${staging[@]}"; do
  args+=("-replace=${m}=${m}@${staging_version}")
done

go mod edit "${drop[@]}" "${args[@]}"
echo "pinned k8s.io/kubernetes ${k8s_version} and ${#staging[@]} staging modules at ${staging_version}"
