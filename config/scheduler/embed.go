// Package scheduler holds the kube-scheduler configuration of the celsched
// manager (scheduler-config.yaml): the manager's default, and the file the
// Deployment mounts.
package scheduler

import _ "embed"

// DefaultConfig is scheduler-config.yaml.
//
//go:embed scheduler-config.yaml
var DefaultConfig []byte
