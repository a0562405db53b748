package preemption

import (
	"context"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
	"k8s.io/utils/lru"

	"github.com/celsched/celsched/celplugins"
	"github.com/celsched/celsched/engine"
)

// moreImportant is DefaultPreemption's MoreImportantVictim with the
// policies' importance between priority and kube-scheduler's own order:
// of two victims of equal priority, the one the enforced policies value
// more (spec.preemption.importance) is more important, and spared first;
// equal importance leaves kube-scheduler's order (pod groups before pods,
// then the longest running). Without a policy that sets importance it is
// kube-scheduler's order exactly.
func (pl *Preemption) moreImportant(v1, v2 preemption.Victim) bool {
	if v1.Priority() == v2.Priority() {
		if snapshot := pl.rt.Inputs.Policies.Snapshot(); pl.ordersVictims(snapshot) {
			if i1, i2 := pl.importance(snapshot, v1), pl.importance(snapshot, v2); i1 != i2 {
				return i1 > i2
			}
		}
	}
	return preemption.MoreImportantVictim(v1, v2)
}

// importances are what moreImportant keeps: whether a snapshot of
// policies orders victims, and each pod's importance under it.
type importances struct {
	// orders says whether a policy of the snapshot sets importance.
	// Key: the snapshot (a new one replaces it). Written by ordersVictims.
	orders atomic.Pointer[snapshotOrders]
	// pods are the pods' importance (*podImportance). Key: pod UID
	// (resourceVersion and snapshot checked on read). Bound: maxImportances
	// (LRU). Written by importance.
	pods *lru.Cache
}

type snapshotOrders struct {
	snapshot *engine.Snapshot
	orders   bool
}

type podImportance struct {
	resourceVersion string
	snapshot        *engine.Snapshot
	value           float64
}

// maxImportances bounds the pods whose importance is kept: the candidate
// victims of a busy preemption, as Converter.Victim's.
const maxImportances = 16384

func (pl *Preemption) ordersVictims(snapshot *engine.Snapshot) bool {
	if o := pl.importances.orders.Load(); o != nil && o.snapshot == snapshot {
		return o.orders
	}
	o := &snapshotOrders{snapshot: snapshot}
	for _, p := range snapshot.Policies() {
		if p.HasImportance() {
			o.orders = true
			break
		}
	}
	pl.importances.orders.Store(o)
	return o.orders
}

// importance is a victim's: the highest of its pods'.
func (pl *Preemption) importance(snapshot *engine.Snapshot, v preemption.Victim) float64 {
	var out float64
	for i, pi := range v.Pods() {
		if value := pl.podImportance(snapshot, pi.GetPod()); i == 0 || value > out {
			out = value
		}
	}
	return out
}

// podImportance is the highest importance that the enforced policies
// applying to the pod give it, 0 when none does; an expression that
// fails gives nothing (logged at V(2)).
func (pl *Preemption) podImportance(snapshot *engine.Snapshot, pod *corev1.Pod) float64 {
	if v, ok := pl.importances.pods.Get(pod.UID); ok {
		if pi := v.(*podImportance); pi.resourceVersion == pod.ResourceVersion && pi.snapshot == snapshot && pod.ResourceVersion != "" {
			return pi.value
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), celplugins.DefaultEvaluationBudget)
	defer cancel()
	var value float64
	m, err := pl.rt.Inputs.Match(ctx, pod)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Victim's importance not evaluated: its policies could not be matched", "pod", klog.KObj(pod), "err", err)
		return 0
	}
	found := false
	for _, p := range m.Importance {
		v, err := p.Importance(ctx, m.Pod)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Victim's importance not evaluated", "pod", klog.KObj(pod), "policy", p.Name, "err", err)
			continue
		}
		if !found || v > value {
			value, found = v, true
		}
	}
	pl.importances.pods.Add(pod.UID, &podImportance{resourceVersion: pod.ResourceVersion, snapshot: snapshot, value: value})
	return value
}
