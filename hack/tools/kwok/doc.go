// Package tools pins KWOK (Kubernetes WithOut Kubelet) in a module of its
// own, so its dependencies never change the versions celsched is built and
// tested with. The Makefile builds its kwok controller (sigs.k8s.io/kwok/cmd/kwok)
// into bin/kwok/<version>/; test/kwok runs it against the envtest control
// plane, so that nodes heartbeat and pods run and terminate.
package tools
