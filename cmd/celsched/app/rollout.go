package app

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/simulate/source"
)

// newRolloutCommand is `celsched rollout status|pause|resume|promote|abort
// POLICY`: status reads status.rollout; the others set the annotation the
// manager's rollout controller acts on (and removes), so that nothing is
// kept but in the policy.
func newRolloutCommand(s *streams) *cobra.Command {
	kube := genericclioptions.NewConfigFlags(true)
	cmd := &cobra.Command{
		Use:   "rollout status|pause|resume|promote|abort POLICY",
		Short: "Show or steer a SchedulingPolicy's rollout (spec.rollout)",
		Long: `rollout shows a policy's rollout wave by wave (status), or asks the manager to
pause it, resume it (the current wave soaks again, its counts reset; after
an abort, the rollout starts again from the first wave), promote the
current wave to Enforce now, or abort it (every wave is audited again,
including the waves already promoted, and the rollout stops until
resumed). The request is the annotation ` + schedv1alpha1.RolloutActionAnnotation + `
on the policy, "<action>/<id>" with a new id: the manager's leader applies
it once, at once on the annotation's event, records its id in status.rollout.lastAction and an
Event, and removes the annotation.`,
		Example: `  kubectl celsched rollout status gpu-nodes-for-gpu-pods
  kubectl celsched rollout promote gpu-nodes-for-gpu-pods`,
	}
	kube.AddFlags(cmd.PersistentFlags())
	cmd.AddCommand(&cobra.Command{
		Use:   "status POLICY",
		Short: "Print the rollout's phase and each wave's phase, times and counts",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := source.NewClient(kube)
			if err != nil {
				return err
			}
			p, err := getPolicy(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			return printRollout(s.out, p, time.Now())
		},
	})
	for _, action := range []struct{ name, short string }{
		{schedv1alpha1.RolloutActionPause, "Pause the rollout at its current wave"},
		{schedv1alpha1.RolloutActionResume, "Resume a paused rollout (the current wave soaks again) or an aborted one (from the first wave)"},
		{schedv1alpha1.RolloutActionPromote, "Promote the current wave to Enforce now"},
		{schedv1alpha1.RolloutActionAbort, "Audit every wave again, the promoted ones too, and stop the rollout"},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   action.name + " POLICY",
			Short: action.short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := source.NewClient(kube)
				if err != nil {
					return err
				}
				request := schedv1alpha1.RolloutActionRequest(action.name, string(uuid.NewUUID()))
				if err := requestRollout(cmd.Context(), c, args[0], request); err != nil {
					return err
				}
				fmt.Fprintf(s.out, "SchedulingPolicy %s: %s requested (annotation %s=%s); the manager acts on it at once: celsched rollout status %s\n",
					args[0], action.name, schedv1alpha1.RolloutActionAnnotation, request, args[0])
				return nil
			},
		})
	}
	return cmd
}

func getPolicy(ctx context.Context, c client.Client, name string) (*schedv1alpha1.SchedulingPolicy, error) {
	p := &schedv1alpha1.SchedulingPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, inputError(fmt.Errorf("SchedulingPolicy %s not found", name))
		}
		return nil, err
	}
	if p.Spec.Rollout == nil {
		return nil, inputError(fmt.Errorf("SchedulingPolicy %s has no spec.rollout", name))
	}
	return p, nil
}

// requestRollout sets the action annotation to request, unless another
// action is pending: one the manager has not applied yet (an annotation it
// applied, which status.rollout.lastAction names, is replaced). The patch
// is conditional on the version read (so that two requests cannot both see
// none pending), and read again when the policy changed meanwhile: the
// manager writes its status often during a rollout.
func requestRollout(ctx context.Context, c client.Client, name, request string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := getPolicy(ctx, c, name)
		if err != nil {
			return err
		}
		if pending := p.Annotations[schedv1alpha1.RolloutActionAnnotation]; pending != "" && !applied(p, pending) {
			return inputError(fmt.Errorf("SchedulingPolicy %s: %q is already requested and not yet done (is the manager running?)", name, pending))
		}
		patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
		metav1.SetMetaDataAnnotation(&p.ObjectMeta, schedv1alpha1.RolloutActionAnnotation, request)
		return c.Patch(ctx, p, patch)
	})
}

// applied says whether the manager has applied the request (its status
// names it as the last action).
func applied(p *schedv1alpha1.SchedulingPolicy, request string) bool {
	st := p.Status.Rollout
	return st != nil && st.LastAction != nil && st.LastAction.ID == request
}

// printRollout prints status.rollout.
func printRollout(w io.Writer, p *schedv1alpha1.SchedulingPolicy, now time.Time) error {
	st := p.Status.Rollout
	if st == nil || st.ObservedGeneration != p.Generation {
		fmt.Fprintf(w, "SchedulingPolicy %s: the rollout of generation %d has not started yet (is the manager running?)\n", p.Name, p.Generation)
		return nil
	}
	fmt.Fprintf(w, "SchedulingPolicy %s: rollout %s", p.Name, st.Phase)
	if st.PauseReason != "" {
		fmt.Fprintf(w, " (%s)", st.PauseReason)
	}
	if st.Message != "" {
		fmt.Fprintf(w, ": %s", st.Message)
	}
	fmt.Fprintln(w)
	if a := st.LastAction; a != nil {
		fmt.Fprintf(w, "Last action: %s, %s %s\n", a.ID, a.Outcome, ago(&a.Time, now))
	}
	if pending := p.Annotations[schedv1alpha1.RolloutActionAnnotation]; pending != "" && !applied(p, pending) {
		fmt.Fprintf(w, "Requested, not yet applied: %s\n", pending)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WAVE\tPHASE\tSOAK\tSTARTED\tPROMOTED\tEVALUATED\tWOULD REJECT\tPENDING\tGATE\tLAST PODS")
	for i, ws := range st.Waves {
		spec := p.Spec.Rollout.Waves[i]
		pods := slices.Clone(ws.LastViolations)
		for _, pod := range ws.PendingViolations {
			pods = append(pods, pod+" (pending)")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", ws.Name, ws.Phase, spec.Soak.Duration, ago(ws.StartTime, now), ago(ws.PromotedTime, now),
			ws.Evaluated, ws.WouldReject, ws.PendingWouldReject, spec.Gate(), orDash(strings.Join(pods, ", ")))
	}
	return tw.Flush()
}

func ago(t *metav1.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return now.Sub(t.Time).Round(time.Second).String() + " ago"
}
