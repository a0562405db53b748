package app

import (
	"github.com/spf13/pflag"

	"github.com/celsched/celsched/simulate/source"
)

// addClusterFlags adds the flags of a cluster read live (the kubectl
// connection flags) or from files, and of the scheduler configuration.
func addClusterFlags(f *pflag.FlagSet, src *source.Source) {
	src.Kube.AddFlags(f)
	f.StringSliceVar(&src.Files.Nodes, "nodes", nil, "offline: node files (documents or a List)")
	f.StringSliceVar(&src.Files.Pods, "pods", nil, "offline: pod files, pending and bound")
	f.StringSliceVar(&src.Files.Namespaces, "namespaces", nil, "offline: namespace files")
	f.StringSliceVar(&src.Files.PodGroups, "pod-groups", nil, "offline: PodGroup files (scheduling.k8s.io/v1beta1)")
	f.StringSliceVar(&src.Files.Policies, "policies", nil, "offline: the SchedulingPolicy files or directories in force (instead of those of --dump)")
	f.StringSliceVar(&src.Files.Params, "params", nil, "offline: files of the params objects in force of parameterized policies (ConfigMaps, custom resources and their CustomResourceDefinitions)")
	f.StringSliceVar(&src.Files.Dump, "dump", nil, "offline: files of Nodes, Pods, Namespaces, PodGroups, SchedulingPolicies, params objects (and their CustomResourceDefinitions) and volume objects, or Lists of them")
	f.StringVar(&src.Config, "config", "", "KubeSchedulerConfiguration (default: the manager's built-in one)")
}
