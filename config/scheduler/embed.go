// Package scheduler holds the kube-scheduler configuration of the celsched
// manager (scheduler-config.yaml): the manager's default, and the file the
// Deployment mounts.
package scheduler

import (
	_ "embed"
	"fmt"
	"os"

	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	configscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
)

// DefaultConfig is scheduler-config.yaml.
//
//go:embed scheduler-config.yaml
var DefaultConfig []byte

// Load reads, defaults and validates a KubeSchedulerConfiguration: the
// file, or DefaultConfig when file is empty.
func Load(file string) (*schedulerconfig.KubeSchedulerConfiguration, error) {
	data, source := DefaultConfig, "the built-in scheduler configuration"
	if file != "" {
		var err error
		if data, err = os.ReadFile(file); err != nil {
			return nil, fmt.Errorf("reading the scheduler configuration: %w", err)
		}
		source = file
	}
	obj, gvk, err := configscheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", source, err)
	}
	cfg, ok := obj.(*schedulerconfig.KubeSchedulerConfiguration)
	if !ok {
		return nil, fmt.Errorf("%s is a %s, not a KubeSchedulerConfiguration", source, gvk)
	}
	cfg.APIVersion = gvk.GroupVersion().String()
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return cfg, nil
}
