#!/usr/bin/env bash
# Builds the envtest control plane (kube-apiserver and etcd), and kubectl, from
# the Go module proxy into a versioned directory under bin/, and prints that
# directory (use it as KUBEBUILDER_ASSETS).
#
# kube-apiserver comes from k8s.io/kubernetes/cmd/kube-apiserver, kubectl from
# k8s.io/kubernetes/cmd/kubectl and etcd from go.etcd.io/etcd/server/v3, all at
# the versions pinned in go.mod, so the test control plane is the one the
# scheduler is built against; test/examples runs the docs' kubectl commands
# with this kubectl, not the machine's. Binaries that are
# present and report the right version are reused; nothing is downloaded from
# anywhere but the Go module proxy.
#
# Usage: hack/envtest-assets.sh   (prints the assets directory on stdout)
set -euo pipefail

cd "$(dirname "$0")/.."

k8s_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd_version=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
dir="bin/k8s/${k8s_version}-etcd-${etcd_version}-$(go env GOOS)-$(go env GOARCH)"
mkdir -p "${dir}"

log() { echo "envtest-assets: $*" >&2; }

# Stamp the version the way kubernetes' own build does, so /version (and
# kubectl version) answers ${k8s_version} and not v0.0.0-master.
version_ldflags() {
  local minor=${k8s_version#v1.}
  minor=${minor%%.*}
  local pkg=k8s.io/component-base/version
  echo "-s -w -X ${pkg}.gitVersion=${k8s_version} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"
}

# kube-apiserver --version prints "Kubernetes v1.37.2".
if [[ -x "${dir}/kube-apiserver" ]] && [[ "$("${dir}/kube-apiserver" --version 2>/dev/null)" == "Kubernetes ${k8s_version}" ]]; then
  log "reusing ${dir}/kube-apiserver (${k8s_version})"
else
  log "building kube-apiserver ${k8s_version} (a few minutes, once)"
  go build -ldflags "$(version_ldflags)" -o "${dir}/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
  mv "${dir}/kube-apiserver.tmp" "${dir}/kube-apiserver"
fi

# kubectl version --client prints "Client Version: v1.37.2" on its first line.
if [[ -x "${dir}/kubectl" ]] && grep -qx "Client Version: ${k8s_version}" <<<"$("${dir}/kubectl" version --client 2>/dev/null)"; then
  log "reusing ${dir}/kubectl (${k8s_version})"
else
  log "building kubectl ${k8s_version}"
  go build -ldflags "$(version_ldflags)" -o "${dir}/kubectl.tmp" k8s.io/kubernetes/cmd/kubectl
  mv "${dir}/kubectl.tmp" "${dir}/kubectl"
fi

# etcd --version prints "etcd Version: 3.7.0" on its first line.
# (Read whole before grep: grep -q stops at the first line, and etcd writing
# the rest into the closed pipe would fail the pipeline under pipefail.)
if [[ -x "${dir}/etcd" ]] && grep -qx "etcd Version: ${etcd_version#v}" <<<"$("${dir}/etcd" --version 2>/dev/null)"; then
  log "reusing ${dir}/etcd (${etcd_version})"
else
  log "building etcd ${etcd_version}"
  go build -ldflags "-s -w" -o "${dir}/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "${dir}/etcd.tmp" "${dir}/etcd"
fi

echo "${dir}"
