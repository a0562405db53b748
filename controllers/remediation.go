package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/simulate/verdict"
)

// Reasons remediation does not act (status.drift.remediation.reason).
const (
	RemediationDisabled    = "DisabledByManager"
	RemediationNotEnforced = "PolicyNotEnforced"
	RemediationPaused      = "RolloutPaused"
	RemediationDeleting    = "PolicyDeleting"
)

// +kubebuilder:rbac:groups=apps,resources=replicasets;statefulsets,verbs=get
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get
// +kubebuilder:rbac:groups="",resources=replicationcontrollers,verbs=get

// budgetRecheck is how often a policy whose drifted pods wait for their
// workload's budget (pods becoming Ready) is looked at again.
const budgetRecheck = 2 * time.Second

// remediationActive says whether remediation acts on the policy now, and
// if not, why.
func (d *DriftController) remediationActive(p *schedv1alpha1.SchedulingPolicy) (bool, string) {
	switch {
	case !d.Remediation || d.Evict == nil:
		return false, RemediationDisabled
	case p.DeletionTimestamp != nil:
		return false, RemediationDeleting
	case p.Spec.Remediation == nil:
		return false, ""
	case p.Spec.Rollout == nil && p.Spec.Enforcement == schedv1alpha1.Audit:
		return false, RemediationNotEnforced
	case p.Status.Rollout != nil && p.Status.Rollout.Phase == schedv1alpha1.RolloutPaused:
		return false, RemediationPaused
	case p.Status.Rollout != nil && p.Status.Rollout.Phase == schedv1alpha1.RolloutAborted:
		return false, RemediationNotEnforced
	}
	return true, ""
}

// workloadEvictions is what remediation keeps of one workload (the pods
// of one controller) it evicted from, to check that the evictions had
// the effect it assumed: their replacements land on nodes the policy
// admits.
type workloadEvictions struct {
	namespace, kind, name string
	// last is the latest eviction; evicted counts them.
	last    time.Time
	evicted int
	// from are the nodes the evicted pods ran on; known are the UIDs of
	// the workload's pods when they were evicted: a pod not among them is
	// a replacement (or a pod the workload made since).
	from  sets.Set[string]
	known sets.Set[types.UID]
	// generation is the controller's generation at the last eviction.
	generation int64
	// open is why the workload's remediation stopped (its circuit
	// breaker); empty while closed. checked is when the controller's
	// template was last read to see whether it changed since.
	open    string
	checked time.Time
}

// remediate evicts the policy's drifted pods that may be, within the
// rate and each workload's budget, and says why the others are not
// (blocked). It returns the remediation's status and when to look again.
func (d *DriftController) remediate(ctx context.Context, p *schedv1alpha1.SchedulingPolicy, mem *remediationMemory,
	keys []types.NamespacedName, pods map[types.NamespacedName]driftedPod, blocked map[types.NamespacedName]schedv1alpha1.RemediationBlockReason) (*schedv1alpha1.RemediationStatus, time.Duration, error) {
	log := ctrl.LoggerFrom(ctx).WithName("remediation")
	rs := &schedv1alpha1.RemediationStatus{}
	if old := p.Status.Drift; old != nil && old.Remediation != nil {
		rs.Evicted, rs.LastEvictionTime = old.Remediation.Evicted, old.Remediation.LastEvictionTime
	}
	// The evictions not written yet (a write held back, or failed).
	rs.Evicted += mem.unwrittenEvictions
	if !mem.lastEviction.IsZero() && (rs.LastEvictionTime == nil || mem.lastEviction.After(rs.LastEvictionTime.Time)) {
		rs.LastEvictionTime = &metav1.Time{Time: mem.lastEviction}
	}
	rs.Active, rs.Reason = d.remediationActive(p)
	if !rs.Active || len(keys) == 0 {
		return rs, 0, nil
	}
	spec := p.Spec.Remediation
	rate := int(spec.Rate)
	if rate <= 0 {
		rate = 1
	}
	now := d.now()
	// Evictions are spaced evenly: one per minute/rate.
	spacing := time.Minute / time.Duration(rate)
	last := mem.lastEviction
	if rs.LastEvictionTime != nil && rs.LastEvictionTime.After(last) {
		last = rs.LastEvictionTime.Time // a previous leader's
	}
	var next time.Duration
	later := func(after time.Duration) {
		if after > 0 && (next == 0 || after < next) {
			next = after
		}
	}
	later(d.checkReplacements(ctx, p, mem, pods, now))
	for key := range mem.told {
		if _, ok := pods[key]; !ok {
			delete(mem.told, key) // no longer drifted
		}
	}
	// The rate is shared: the pods of the namespace evicted from longest
	// ago (or never) go first, so that one namespace cannot take the
	// evictions of the others (and a workload whose replacements come
	// back is stopped by its breaker).
	keys = slices.Clone(keys)
	slices.SortStableFunc(keys, func(a, b types.NamespacedName) int {
		return mem.namespaces[a.Namespace].Compare(mem.namespaces[b.Namespace])
	})
	// unavailable counts, per workload, the pods unavailable, with those
	// evicted in this step.
	unavailable := map[types.UID]int{}
	profiles, all := verdict.EnforcingProfiles(d.Live.Config, p), profileNames(d.Live)
	var e *verdict.Evaluator
	var release func()
	defer func() {
		if release != nil {
			release()
		}
	}()
	for _, key := range keys {
		pod, err := d.Pods.Pods(key.Namespace).Get(key.Name)
		if err != nil || !running(pod) || pod.UID != pods[key].uid {
			continue // gone or changed: the tracker's next step says
		}
		owner := metav1.GetControllerOf(pod)
		if !verdict.Replaced(pod) {
			blocked[key] = schedv1alpha1.BlockedNoController
			continue
		}
		if w := mem.workloads[owner.UID]; w != nil && w.open != "" {
			blocked[key] = schedv1alpha1.BlockedReplacementRefused
			continue
		}
		if spec.MinAge != nil {
			if age := now.Sub(pod.CreationTimestamp.Time); age < spec.MinAge.Duration {
				blocked[key] = schedv1alpha1.BlockedTooYoung
				later(spec.MinAge.Duration - age)
				continue
			}
		}
		if wait := last.Add(spacing).Sub(now); !last.IsZero() && wait > 0 {
			blocked[key] = schedv1alpha1.BlockedRate
			later(wait)
			continue
		}
		n, ok := unavailable[owner.UID]
		total := 0
		if !ok {
			if n, total, err = d.workload(pod.Namespace, owner.UID); err != nil {
				return nil, 0, err
			}
			unavailable[owner.UID] = n
		} else {
			_, total, _ = d.workload(pod.Namespace, owner.UID)
		}
		if n >= maxUnavailable(spec.MaxUnavailable, total) {
			blocked[key] = schedv1alpha1.BlockedBudget
			later(budgetRecheck)
			continue
		}
		if e == nil {
			if e, release, err = d.Live.Evaluator(ctx); err != nil {
				return nil, 0, err
			}
		}
		// The pod must still be refused (the policy as the scheduler has
		// it now), and its replacement, as its controller will create it,
		// must be placed elsewhere under the policy.
		judged, _ := verdict.AsProfile(pod, all)
		refused, err := refusedBy(ctx, e, judged, p.Name)
		if err != nil || !refused {
			continue
		}
		tmpl, err := verdict.OwnerTemplate(ctx, d.Reader, pod)
		if err != nil {
			if apierrors.IsNotFound(err) {
				blocked[key] = schedv1alpha1.BlockedNoController // its controller is gone: nothing replaces it
			} else {
				log.V(2).Info("Not reading the controller of a drifted pod", "pod", klog(pod), "err", err)
			}
			continue
		}
		r, err := e.Replace(ctx, pod, tmpl, p.Name, profiles)
		if err != nil {
			log.V(2).Info("Not evaluating the replacement of a drifted pod", "pod", klog(pod), "err", err)
			continue
		}
		if r.Blocked != "" {
			blocked[key] = r.Blocked
			if mem.told[key] != r.Blocked && d.Recorder != nil {
				d.Recorder.Eventf(p, pod, corev1.EventTypeWarning, ReasonRemediationBlocked, "Remediate",
					"not evicting pod %s from node %s (%s): %s", key, pod.Spec.NodeName, r.Blocked, r.Message)
			}
			mem.tell(key, r.Blocked)
			continue
		}
		// Read the policy fresh: an eviction never follows a policy
		// switched to Audit, paused or deleted since the cache saw it.
		fresh := &schedv1alpha1.SchedulingPolicy{}
		if err := d.Reader.Get(ctx, client.ObjectKey{Name: p.Name}, fresh); err != nil {
			if apierrors.IsNotFound(err) {
				return rs, 0, nil
			}
			return nil, 0, err
		}
		if active, why := d.remediationActive(fresh); !active {
			rs.Active, rs.Reason = false, why
			return rs, 0, nil
		}
		if err := d.Evict(ctx, pod); err != nil {
			if apierrors.IsTooManyRequests(err) {
				blocked[key] = schedv1alpha1.BlockedDisruptionBudget
				later(budgetRecheck)
				continue
			}
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, 0, fmt.Errorf("evicting pod %s: %w", key, err)
		}
		log.Info("Evicted a drifted pod", "pod", klog(pod), "node", pod.Spec.NodeName, "policy", p.Name, "replacementNode", r.Node)
		mem.lastEviction, last = now, now
		mem.unwrittenEvictions++
		siblings, _ := d.ownedPods(pod.Namespace, owner.UID)
		mem.evicted(owner, pod, tmpl, siblings, now)
		later(schedv1alpha1.ReplacementDeadline)
		unavailable[owner.UID]++
		rs.Evicted++
		rs.LastEvictionTime = &metav1.Time{Time: now}
		if d.Recorder != nil {
			d.Recorder.Eventf(p, nil, corev1.EventTypeNormal, ReasonPodEvicted, "Remediate",
				"evicted pod %s from node %s (%s); its replacement has a node (%s)", key, pod.Spec.NodeName, truncateTo(pods[key].message, 256), r.Node)
		}
	}
	return rs, next, nil
}

// tell records the reason a pod's RemediationBlocked event gave.
func (mem *remediationMemory) tell(key types.NamespacedName, r schedv1alpha1.RemediationBlockReason) {
	if mem.told == nil {
		mem.told = map[types.NamespacedName]schedv1alpha1.RemediationBlockReason{}
	}
	mem.told[key] = r
}

// evicted records an eviction of a workload's pod.
func (mem *remediationMemory) evicted(owner *metav1.OwnerReference, pod *corev1.Pod, tmpl *verdict.Template, siblings []*corev1.Pod, now time.Time) {
	if mem.workloads == nil {
		mem.workloads = map[types.UID]*workloadEvictions{}
	}
	if mem.namespaces == nil {
		mem.namespaces = map[string]time.Time{}
	}
	mem.namespaces[pod.Namespace] = now
	w := mem.workloads[owner.UID]
	if w == nil {
		w = &workloadEvictions{namespace: pod.Namespace, kind: owner.Kind, name: owner.Name, from: sets.New[string](), known: sets.New[types.UID]()}
		mem.workloads[owner.UID] = w
	}
	w.last = now
	w.evicted++
	w.from.Insert(pod.Spec.NodeName)
	w.known.Insert(pod.UID)
	for _, s := range siblings {
		w.known.Insert(s.UID)
	}
	if tmpl != nil {
		w.generation = tmpl.Generation
	}
}

// checkReplacements checks, for each workload the policy's remediation
// evicted from, that the evictions had the effect assumed: a pod of the
// workload created since that runs, drifted, on a node a pod was evicted
// from means its replacements come back (its controller pins them, or
// something other than the policy's scheduler places them), and no
// replacement running within ReplacementDeadline means they do not land;
// either opens the workload's circuit breaker, with an Event. An open
// breaker closes when the controller's template changes. It returns when
// to look again.
func (d *DriftController) checkReplacements(ctx context.Context, p *schedv1alpha1.SchedulingPolicy, mem *remediationMemory,
	drifted map[types.NamespacedName]driftedPod, now time.Time) time.Duration {
	var next time.Duration
	for uid, w := range mem.workloads {
		if w.open != "" {
			if now.Sub(w.checked) < time.Minute {
				continue
			}
			w.checked = now
			owner := &metav1.OwnerReference{Kind: w.kind, Name: w.name, UID: uid, Controller: ptr.To(true)}
			probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.namespace, OwnerReferences: []metav1.OwnerReference{*owner}}}
			tmpl, err := verdict.OwnerTemplate(ctx, d.Reader, probe)
			switch {
			case apierrors.IsNotFound(err):
				delete(mem.workloads, uid) // the workload is gone
			case err == nil && tmpl != nil && tmpl.Generation != w.generation:
				delete(mem.workloads, uid) // its template changed: try again
			}
			continue
		}
		list, err := d.ownedPods(w.namespace, uid)
		if err != nil {
			continue
		}
		landed, back := 0, ""
		for _, pod := range list {
			if w.known.Has(pod.UID) || !running(pod) {
				continue
			}
			key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
			if dp, ok := drifted[key]; ok && dp.uid == pod.UID && w.from.Has(pod.Spec.NodeName) {
				back = fmt.Sprintf("pod %s, created after the eviction, runs again on node %s, which the policy refuses", key, pod.Spec.NodeName)
				break
			}
			landed++
		}
		due := w.last.Add(schedv1alpha1.ReplacementDeadline)
		switch {
		case back != "":
			d.openBreaker(p, mem, uid, w, back, now)
		case landed >= w.evicted && !now.Before(due):
			delete(mem.workloads, uid) // every replacement landed admitted
		case landed < w.evicted && !now.Before(due):
			d.openBreaker(p, mem, uid, w, fmt.Sprintf("%d of its %d evicted pod(s) have no running replacement %s after the last eviction", w.evicted-landed, w.evicted, schedv1alpha1.ReplacementDeadline), now)
		default:
			if wait := due.Sub(now); next == 0 || wait < next {
				next = wait
			}
		}
	}
	for ns, at := range mem.namespaces {
		if now.Sub(at) > time.Hour {
			delete(mem.namespaces, ns)
		}
	}
	return next
}

// openBreaker stops the remediation of a workload, with an Event that
// says why.
func (d *DriftController) openBreaker(p *schedv1alpha1.SchedulingPolicy, mem *remediationMemory, uid types.UID, w *workloadEvictions, why string, now time.Time) {
	w.open, w.checked = why, now
	ctrl.Log.WithName("remediation").Info("Stopped remediating a workload: its evictions do not move it", "policy", p.Name,
		"workload", w.kind+" "+w.namespace+"/"+w.name, "uid", uid, "reason", why)
	if d.Recorder != nil {
		d.Recorder.Eventf(p, nil, corev1.EventTypeWarning, ReasonRemediationStopped, "Remediate",
			"stopped remediating %s %s/%s (%s): %s; its pods stay in status.drift, and remediation of the workload resumes when its template or the policy changes",
			w.kind, w.namespace, w.name, schedv1alpha1.BlockedReplacementRefused, why)
	}
}

// refusedBy says whether the policy, as the scheduler has it, refuses the
// running pod its node.
func refusedBy(ctx context.Context, e *verdict.Evaluator, pod *corev1.Pod, policy string) (bool, error) {
	rs, err := e.Refusals(ctx, pod)
	if err != nil {
		return false, err
	}
	for _, r := range rs {
		if r.Policy == policy {
			return true, nil
		}
	}
	return false, nil
}

// ownedPods are a controller's pods in a namespace, as the scheduler's
// informer holds them.
func (d *DriftController) ownedPods(namespace string, owner types.UID) ([]*corev1.Pod, error) {
	list, err := d.Pods.Pods(namespace).List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	return slices.DeleteFunc(list, func(pod *corev1.Pod) bool {
		ref := metav1.GetControllerOf(pod)
		return ref == nil || ref.UID != owner
	}), nil
}

// workload counts a controller's pods in a namespace that have not
// terminated (total) and those of them that are unavailable: being
// deleted, or not Ready.
func (d *DriftController) workload(namespace string, owner types.UID) (unavailable, total int, err error) {
	list, err := d.ownedPods(namespace, owner)
	if err != nil {
		return 0, 0, err
	}
	for _, pod := range list {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		total++
		if pod.DeletionTimestamp != nil || !podReady(pod) {
			unavailable++
		}
	}
	return unavailable, total, nil
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// maxUnavailable resolves spec.remediation.maxUnavailable for a workload
// of total pods: an integer, or a percentage rounded down; at least 1.
func maxUnavailable(v *intstr.IntOrString, total int) int {
	if v == nil {
		return 1
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, false)
	if err != nil || n < 1 {
		return 1
	}
	return n
}
