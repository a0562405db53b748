package performance

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
)

// nodeOnly10PluginName is the plugin of NodeOnly10Plugin's native profile:
// NodeOnly10's ten rules as a platform team would write them into a
// kube-scheduler plugin of its own, in Go (scheduler-plugins' way), plainly:
// kube-scheduler calls it per node as it calls CELFilter and CELScore, and
// it reads the node's labels, nothing else, so it costs what kube-scheduler
// charges any plugin holding these rules and twenty label lookups per node.
const nodeOnly10PluginName = "NodeOnly10Rules"

// nodeOnly10Profile is the profile that runs nodeOnly10Plugin
// (scheduler-config-plugin.yaml), the schedulerName of
// templates/pod-node-only10-plugin.yaml.
const nodeOnly10Profile = "node-only10-plugin"

// nodeOnly10Labels are the labels NodeOnly10's policies read
// (testdata/NodeOnly10.yaml, templates/node.yaml): rule i keeps pods off the
// nodes whose label perf.celsched.io/l<i> is "blocked" and scores 100 where
// it is "preferred".
var nodeOnly10Labels = func() [10]string {
	var keys [10]string
	for i := range keys {
		keys[i] = fmt.Sprintf("perf.celsched.io/l%d", i)
	}
	return keys
}()

// nodeOnly10Plugin implements NodeOnly10's rules in Go.
type nodeOnly10Plugin struct{}

var (
	_ fwk.FilterPlugin = nodeOnly10Plugin{}
	_ fwk.ScorePlugin  = nodeOnly10Plugin{}
	_ fwk.SignPlugin   = nodeOnly10Plugin{}
)

func newNodeOnly10Plugin(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
	return nodeOnly10Plugin{}, nil
}

func (nodeOnly10Plugin) Name() string { return nodeOnly10PluginName }

// SignPod signs every pod alike: the rules read nothing of the pod, so
// kube-scheduler's opportunistic batching may reuse a pod's results for the
// next (as CELFilter and CELScore sign a pod by what the policies read).
func (nodeOnly10Plugin) SignPod(context.Context, *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return nil, nil
}

// Filter rejects a node where any of the ten labels is "blocked", with the
// policies' message.
func (nodeOnly10Plugin) Filter(_ context.Context, _ fwk.CycleState, _ *corev1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	labels := nodeInfo.Node().Labels
	for _, key := range nodeOnly10Labels {
		if labels[key] == "blocked" {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node is blocked for this workload")
		}
	}
	return nil
}

// Score is the mean of the ten rules' scores (100 where the label is
// "preferred", else 0), as CELScore combines ten rules of weight 1 and
// normalization None.
func (nodeOnly10Plugin) Score(_ context.Context, _ fwk.CycleState, _ *corev1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	return nodeOnly10Score(nodeInfo.Node()), nil
}

func nodeOnly10Score(node *corev1.Node) int64 {
	var sum int64
	for _, key := range nodeOnly10Labels {
		if node.Labels[key] == "preferred" {
			sum += fwk.MaxScore
		}
	}
	return sum / int64(len(nodeOnly10Labels))
}

// ScoreExtensions is nil: the scores are in 0..100 already.
func (nodeOnly10Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }
