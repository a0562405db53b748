// Package preemption is the PostFilter plugin of celsched:
// kube-scheduler's DefaultPreemption, unchanged, with its IsEligiblePod
// hook asking the victim rules of the policies that match the preemptor
// (spec.preemption.victims) whether it may evict each candidate victim.
package preemption

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/events"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
	"k8s.io/utils/lru"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
)

// Name is the plugin's name in a KubeSchedulerConfiguration. It takes
// DefaultPreemption's place at PostFilter.
const Name = "CELPreemption"

// Preemption is DefaultPreemption whose victims the policies' victim
// rules may protect.
type Preemption struct {
	*defaultpreemption.DefaultPreemption
	rt       *celplugins.Runtime
	recorder events.EventRecorder

	// mu guards protected: what the rules protected during the PostFilter
	// of each preemptor (by UID), which IsEligiblePod records from the
	// nodes' goroutines and PostFilter reports.
	mu        sync.Mutex
	protected map[ktypes.UID]*protections

	// importances order victims of equal priority (moreImportant).
	importances importances
}

// protections are one PostFilter's (or DryRun's) state: the preemptor's
// Match and the context its victim rules run under, made once, and the
// victims protected, by an enforced policy (the victim was not eligible)
// or, would have been, by an Audit one.
type protections struct {
	ctx               context.Context
	cancel            context.CancelFunc
	match             *celplugins.Match
	enforced, audited map[string]bool
}

// budget bounds the victim rules of one preemptor's PostFilter, all
// candidate victims on all the nodes it looks at together (a scheduling
// cycle's filters have DefaultEvaluationBudget): a rule cut off fails,
// and under failurePolicy Fail protects its victim.
const budget = time.Second

// begin starts a preemptor's PostFilter or DryRun: its Match and a
// context with the CEL time budget, for every victim rule it asks. end
// ends it and returns what was protected.
func (pl *Preemption) begin(ctx context.Context, pod *corev1.Pod) {
	p := &protections{enforced: map[string]bool{}, audited: map[string]bool{}}
	p.ctx, p.cancel = context.WithTimeoutCause(ctx, budget, fmt.Errorf("%w (%s)", engine.ErrTimeBudgetExceeded, budget))
	m, err := pl.rt.Inputs.Match(p.ctx, pod)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Victim rules not evaluated: the preemptor's policies could not be matched", "pod", klog.KObj(pod), "err", err)
	}
	p.match = m
	pl.mu.Lock()
	pl.protected[pod.UID] = p
	pl.mu.Unlock()
}

func (pl *Preemption) end(pod *corev1.Pod) *protections {
	pl.mu.Lock()
	p := pl.protected[pod.UID]
	delete(pl.protected, pod.UID)
	pl.mu.Unlock()
	p.cancel()
	return p
}

// current is the preemptor's state during its PostFilter or DryRun, or
// nil.
func (pl *Preemption) current(pod *corev1.Pod) *protections {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.protected[pod.UID]
}

var (
	_ fwk.PostFilterPlugin = &Preemption{}
	_ fwk.PreEnqueuePlugin = &Preemption{}
)

// New builds the plugin; use celplugins.Factory(rt, New) to register it.
// Its arguments are DefaultPreemption's (DefaultPreemptionArgs, v1).
func New(ctx context.Context, obj runtime.Object, h fwk.Handle, rt *celplugins.Runtime) (*Preemption, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	dp, err := defaultpreemption.New(ctx, args, h, feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	pl := &Preemption{DefaultPreemption: dp, rt: rt, recorder: h.EventRecorder(), protected: map[ktypes.UID]*protections{},
		importances: importances{pods: lru.New(maxImportances)}}
	dp.IsEligiblePod = pl.isEligible
	dp.MoreImportantVictim = pl.moreImportant
	return pl, nil
}

// decodeArgs reads DefaultPreemptionArgs (v1, defaulted as kube-scheduler
// defaults them) from a plugin's args: none, or JSON.
func decodeArgs(obj runtime.Object) (*config.DefaultPreemptionArgs, error) {
	v1 := configv1.DefaultPreemptionArgs{}
	if u, ok := obj.(*runtime.Unknown); ok && len(u.Raw) > 0 {
		if err := json.Unmarshal(u.Raw, &v1); err != nil {
			return nil, fmt.Errorf("decoding its args (DefaultPreemptionArgs): %w", err)
		}
	} else if obj != nil {
		if _, ok := obj.(*runtime.Unknown); !ok {
			return nil, fmt.Errorf("args of type %T, want DefaultPreemptionArgs", obj)
		}
	}
	args := &config.DefaultPreemptionArgs{MinCandidateNodesPercentage: 10, MinCandidateNodesAbsolute: 100}
	if v1.MinCandidateNodesPercentage != nil {
		args.MinCandidateNodesPercentage = *v1.MinCandidateNodesPercentage
	}
	if v1.MinCandidateNodesAbsolute != nil {
		args.MinCandidateNodesAbsolute = *v1.MinCandidateNodesAbsolute
	}
	return args, nil
}

// Name implements fwk.Plugin.
func (pl *Preemption) Name() string { return Name }

// PostFilter implements fwk.PostFilterPlugin: DefaultPreemption's, and
// when it finds no victims, the status names the victims the rules
// protected (the pod's PodScheduled condition shows it) and an event
// lists them.
func (pl *Preemption) PostFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	pl.begin(ctx, pod)
	result, status := pl.DefaultPreemption.PostFilter(ctx, state, pod, m)
	p := pl.end(pod)
	if len(p.audited) > 0 {
		pl.recorder.Eventf(pod, nil, corev1.EventTypeNormal, ReasonPreemptionWouldProtect, "Preempt",
			"%s", engine.Truncate("Audit: "+strings.Join(sortedKeys(p.audited), "; "), maxEventNote))
	}
	if len(p.enforced) == 0 || status.IsSuccess() {
		pl.rt.Requeue.PreemptorDone(pod.UID)
		return result, status
	}
	pl.rt.Requeue.RefusedPreemptor(pod)
	protected := strings.Join(sortedKeys(p.enforced), "; ")
	pl.recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonPreemptionRefused, "Preempt", "%s", engine.Truncate(protected, maxEventNote))
	reasons := append(slices.Clone(status.Reasons()), engine.Truncate("victims protected: "+protected, engine.MaxMessageLength))
	return result, fwk.NewStatus(status.Code(), reasons...).WithPlugin(status.Plugin())
}

// DryRun is what DefaultPreemption's PostFilter would decide for a pod
// that no node fits, without acting (no victim deleted, nothing
// nominated): its own dry run (Evaluator.DryRunPreemption) over the
// nodes given (those a filter refused as resolvable: Unschedulable, not
// UnschedulableAndUnresolvable), every one of them a candidate, and the
// candidate it would pick (nil: none). dp is the profile's preemption
// plugin (CELPreemption's, or a stock profile's DefaultPreemption); for
// CELPreemption, protected are the victims the rules protected while it
// looked. PodDisruptionBudgets are not read. why says why the pod may not
// preempt at all (preemptionPolicy Never), when it may not.
func DryRun(ctx context.Context, plugin fwk.Plugin, state fwk.CycleState, pod *corev1.Pod, potential []fwk.NodeInfo) (best preemption.Candidate, protected []string, why string, err error) {
	var dp *defaultpreemption.DefaultPreemption
	pl, cel := plugin.(*Preemption)
	switch {
	case cel:
		dp = pl.DefaultPreemption
	default:
		if dp, _ = plugin.(*defaultpreemption.DefaultPreemption); dp == nil {
			return nil, nil, "", fmt.Errorf("plugin %s is not DefaultPreemption", plugin.Name())
		}
	}
	if ok, msg := dp.PodEligibleToPreemptOthers(ctx, pod, nil); !ok {
		return nil, nil, msg, nil
	}
	if len(potential) == 0 {
		return nil, nil, "no node that preemption could help (every node is refused for a reason removing pods does not change)", nil
	}
	if cel {
		pl.begin(ctx, pod)
	}
	candidates, _, err := dp.Evaluator.DryRunPreemption(ctx, state, pod, potential, nil, 0, int32(len(potential)))
	if cel {
		protected = sortedKeys(pl.end(pod).enforced)
	}
	if err != nil {
		return nil, nil, "", err
	}
	if best = dp.Evaluator.SelectCandidate(ctx, candidates); best == nil {
		why = "no node where evicting pods of lower priority makes room"
		if len(protected) > 0 {
			why += "; victims protected: " + strings.Join(protected, "; ")
		}
	}
	return best, protected, why, nil
}

// Reasons of the events PostFilter records on the preemptor.
const (
	// ReasonPreemptionRefused lists the victims that enforced victim rules
	// protected, when preemption found no victims.
	ReasonPreemptionRefused = "PreemptionRefused"
	// ReasonPreemptionWouldProtect lists the victims that Audit victim
	// rules would have protected.
	ReasonPreemptionWouldProtect = "PreemptionWouldProtect"
)

// maxEventNote is the API server's bound on an event's note.
const maxEventNote = 1024

// isEligible is DefaultPreemption's IsEligiblePod: a victim (a pod, or
// each pod of a group) is eligible unless an enforced policy that matches
// the preemptor has a victim rule that refuses it. A preemptor at or above
// system-cluster-critical's priority is never refused; one whose policies
// cannot be matched now keeps DefaultPreemption's answer (the scheduling
// cycle before has matched them: failing closed here would block system
// recovery, and the match error is the cycle's to report).
func (pl *Preemption) isEligible(nodeInfo fwk.NodeInfo, victim preemption.Victim, preemptor *corev1.Pod) bool {
	if corev1helpers.PodPriority(preemptor) >= engine.SystemCriticalPriority {
		return true
	}
	p := pl.current(preemptor)
	if p == nil {
		// Outside the preemptor's PostFilter (kube-scheduler asks only
		// within it): as in PostFilter, at the cost of a match.
		pl.begin(context.Background(), preemptor)
		defer pl.end(preemptor)
		p = pl.current(preemptor)
	}
	if p.match == nil || len(p.match.Preemption) == 0 {
		return true
	}
	eligible := true
	for _, pi := range victim.Pods() {
		v, err := pl.rt.Inputs.Victim(p.match, pi.GetPod(), nodeInfo.Node())
		if err != nil {
			pl.protect(p, fmt.Sprintf("pod %s/%s protected: %v", pi.GetPod().Namespace, pi.GetPod().Name, err), true)
			return false
		}
		for _, policy := range p.match.Preemption {
			d := policy.Victim(p.ctx, v)
			switch {
			case d.Acts():
				pl.protect(p, engine.Protection(v.Victim, &d), true)
				eligible = false
			case d.WouldAct():
				pl.protect(p, engine.Protection(v.Victim, &d), false)
			}
		}
	}
	return eligible
}

// protect records a protection during the preemptor's PostFilter.
func (pl *Preemption) protect(p *protections, what string, enforced bool) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if enforced {
		p.enforced[what] = true
	} else {
		p.audited[what] = true
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
