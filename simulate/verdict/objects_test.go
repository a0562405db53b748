package verdict

import "github.com/celsched/celsched/test/builder"

// The objects of the tests' clusters.
var (
	namespace  = builder.Namespace
	node       = builder.Node
	pod        = builder.Pod
	requesting = builder.Requesting
	podGroup   = builder.PodGroup
)
