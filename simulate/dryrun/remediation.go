package dryrun

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/simulate/verdict"
)

// Remediation is what a policy's spec.remediation would do to a running
// pod that the policies refuse on its node, as the leader decides it
// (controllers.DriftController) apart from the budgets that depend on
// time and on the workload's other pods (rate, maxUnavailable), which
// Budget states.
type Remediation struct {
	// Policy is the refusing policy with spec.remediation.
	Policy string `json:"policy"`
	// WouldEvict: the pod is owned by a controller that replaces it, old
	// enough, and its replacement has a feasible node.
	WouldEvict bool `json:"wouldEvict"`
	// NotEvicted says why not: NoController, TooYoung, NoFeasibleNode,
	// ReplacementPinned, ReplacementOtherScheduler.
	NotEvicted schedv1alpha1.RemediationBlockReason `json:"notEvicted,omitempty"`
	// Why says it in words.
	Why string `json:"why,omitempty"`
	// Budget is the policy's: maxUnavailable per workload, evictions per
	// minute, minAge.
	Budget string `json:"budget"`
}

// Remediation says what remediation would do to a bound pod with the
// policies of the Scheduler (policies are their objects, for
// spec.remediation): nil when no enforced policy that refuses the pod its
// node has spec.remediation. owners reads the pod's controller, whose
// template its replacement is judged from (nil: the pod itself, unbound).
// now is the clock for minAge.
func (s *Scheduler) Remediation(ctx context.Context, policies []*schedv1alpha1.SchedulingPolicy, pod *corev1.Pod, owners client.Reader, now time.Time) (*Remediation, error) {
	refusals, err := s.Refusals(ctx, pod)
	if err != nil {
		return nil, err
	}
	var spec *schedv1alpha1.SchedulingPolicy
	for _, r := range refusals {
		for _, p := range policies {
			if p.Name == r.Policy && p.Spec.Remediation != nil && spec == nil {
				spec = p
			}
		}
	}
	if spec == nil {
		return nil, nil
	}
	out := &Remediation{Policy: spec.Name, Budget: Budget(spec.Spec.Remediation)}
	switch rem := spec.Spec.Remediation; {
	case !verdict.Replaced(pod):
		out.NotEvicted = schedv1alpha1.BlockedNoController
	case rem.MinAge != nil && now.Sub(pod.CreationTimestamp.Time) < rem.MinAge.Duration:
		out.NotEvicted = schedv1alpha1.BlockedTooYoung
	default:
		var tmpl *verdict.Template
		if owners != nil {
			if tmpl, err = verdict.OwnerTemplate(ctx, owners, pod); err != nil {
				if !apierrors.IsNotFound(err) {
					return nil, err
				}
				out.NotEvicted, out.Why = schedv1alpha1.BlockedNoController, err.Error()
				return out, nil
			}
		}
		r, err := s.Replace(ctx, pod, tmpl, spec.Name, s.EnforcingProfiles(spec))
		if err != nil {
			return nil, err
		}
		out.NotEvicted, out.Why = r.Blocked, r.Message
		out.WouldEvict = r.Blocked == ""
	}
	return out, nil
}

// Budget states a spec.remediation's budget.
func Budget(r *schedv1alpha1.Remediation) string {
	unavailable := "1"
	if r.MaxUnavailable != nil {
		unavailable = r.MaxUnavailable.String()
	}
	rate := r.Rate
	if rate <= 0 {
		rate = 1
	}
	s := fmt.Sprintf("maxUnavailable %s per workload, %d per minute", unavailable, rate)
	if r.MinAge != nil {
		s += ", minAge " + r.MinAge.Duration.String()
	}
	return s
}
