package verdict

import (
	"context"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
)

// Simulator keeps the Evaluators of a live cluster, built once: a
// consumer that evaluates the cluster again and again (the rollout
// gate's counts, remediation's checks) takes its Evaluators from it,
// pointed at the cluster and policies of the moment, instead of building
// kube-scheduler's frameworks, a clientset and informers for every
// count, as cluster-autoscaler builds its framework once and swaps the
// snapshot under it. The built-in plugins read the scheduler's own
// informers (volumes, CSI nodes, namespaces); the nodes and pods are a
// snapshot the caller makes (Live.cluster) and swaps in.
//
// One caller at a time uses a Simulator's Evaluators (a Session):
// retargeting an Evaluator while another goroutine evaluates with it
// would mix two clusters.
type Simulator struct {
	// factory is the scheduler's informer factory; the frameworks'
	// plugins ask it for the informers the scheduler's frameworks asked
	// for already.
	factory informers.SharedInformerFactory
	// mu is held by the Session in use.
	mu sync.Mutex
	// built are the Evaluators by slot; written under mu.
	built map[Slot]*Evaluator
	// builds counts the Evaluators built, for tests.
	builds atomic.Int64
}

// Slot names one of a Simulator's Evaluators: a consumer asks for as
// many as it compares policy sets (the gate: the policies now, and with a
// wave enforced), each with its configuration's profiles, or without
// capacity (WithoutCapacity).
type Slot struct {
	Name            string
	WithoutCapacity bool
}

// NewSimulator returns a Simulator whose frameworks read factory (the
// scheduler's informer factory, started by the scheduler).
func NewSimulator(factory informers.SharedInformerFactory) *Simulator {
	return &Simulator{factory: factory, built: map[Slot]*Evaluator{}}
}

// Builds is how many Evaluators the Simulator has built.
func (s *Simulator) Builds() int64 { return s.builds.Load() }

// Session takes the Simulator (nil: a Session whose Evaluators are built
// for it and closed with it) until Release.
func (s *Simulator) Session() *Session {
	if s != nil {
		s.mu.Lock()
	}
	return &Session{s: s}
}

// Session is a caller's use of a Simulator: the Evaluators it hands out
// stay as it pointed them until Release.
type Session struct {
	s *Simulator
	// made are the Evaluators built for a Session without a Simulator.
	made []*Evaluator
}

// Evaluator returns the Evaluator of the slot pointed at the cluster and
// the policies (snapshot, params, converter), with cfg's profiles (or
// WithoutCapacity's, for such a slot). A Simulator's slot keeps the
// configuration of its first use: the scheduler's, for the process's
// life.
func (ss *Session) Evaluator(ctx context.Context, slot Slot, c *Cluster, policies Policies, cfg *schedulerconfig.KubeSchedulerConfiguration) (*Evaluator, error) {
	if slot.WithoutCapacity {
		cfg = WithoutCapacity(cfg)
	}
	if ss.s == nil {
		e, err := New(ctx, c, policies, Options{Config: cfg})
		if err == nil {
			ss.made = append(ss.made, e)
		}
		return e, err
	}
	s := ss.s
	e := s.built[slot]
	if e == nil {
		// The scheduler's informers, and no writes: what plugins could
		// write outside Filter and Score (bindings, claims) would go to
		// an empty fake clientset, which no evaluation reaches. The
		// Evaluator lives as long as the process: its informers are the
		// scheduler's, started with the scheduler's context.
		var err error
		if e, err = build(context.WithoutCancel(ctx), fake.NewSimpleClientset(), s.factory, policies, Options{Config: cfg}); err != nil { //nolint:staticcheck // NewClientset builds a type converter per call; nothing applies
			return nil, err
		}
		s.built[slot] = e
		s.builds.Add(1)
		klog.FromContext(ctx).V(2).Info("Built a simulator's frameworks", "slot", slot.Name, "withoutCapacity", slot.WithoutCapacity)
	}
	e.retarget(c, policies)
	return e, nil
}

// Release ends the Session: a Simulator's Evaluators go back to it, and
// those built for the Session are closed.
func (ss *Session) Release() {
	for _, e := range ss.made {
		e.Close()
	}
	ss.made = nil
	if ss.s != nil {
		ss.s.mu.Unlock()
		ss.s = nil
	}
}

// snapshotLister is what an Evaluator's frameworks read nodes, pods and
// pod groups through: the snapshot of its last retarget.
type snapshotLister struct {
	cur atomic.Pointer[internalcache.Snapshot]
}

var _ fwk.MutableSnapshotSharedLister = (*snapshotLister)(nil)

func (l *snapshotLister) set(s *internalcache.Snapshot) { l.cur.Store(s) }

func (l *snapshotLister) NodeInfos() fwk.NodeInfoLister       { return l.cur.Load().NodeInfos() }
func (l *snapshotLister) StorageInfos() fwk.StorageInfoLister { return l.cur.Load().StorageInfos() }
func (l *snapshotLister) PodGroupStates() fwk.PodGroupStateLister {
	return l.cur.Load().PodGroupStates()
}
func (l *snapshotLister) PodGroups() fwk.PodGroupLister { return l.cur.Load().PodGroups() }
func (l *snapshotLister) CompositePodGroupStates() fwk.CompositePodGroupStateLister {
	return l.cur.Load().CompositePodGroupStates()
}
func (l *snapshotLister) CompositePodGroups() fwk.CompositePodGroupLister {
	return l.cur.Load().CompositePodGroups()
}
func (l *snapshotLister) StartMutations() error { return l.cur.Load().StartMutations() }
func (l *snapshotLister) EndMutations() error   { return l.cur.Load().EndMutations() }
func (l *snapshotLister) AddPod(podInfo fwk.PodInfo, nodeName string) error {
	return l.cur.Load().AddPod(podInfo, nodeName)
}
func (l *snapshotLister) RemovePod(logger klog.Logger, pod *corev1.Pod, nodeName string) error {
	return l.cur.Load().RemovePod(logger, pod, nodeName)
}

// WithoutCapacity is a copy of a scheduler configuration whose profiles
// do not filter by free resources (NodeResourcesFit's filter disabled):
// which nodes a pod's own constraints, taints, cordons and the policies
// leave it, whether or not they have room now.
func WithoutCapacity(cfg *schedulerconfig.KubeSchedulerConfiguration) *schedulerconfig.KubeSchedulerConfiguration {
	out := cfg.DeepCopy()
	for i := range out.Profiles {
		plugins := out.Profiles[i].Plugins
		if plugins == nil {
			plugins = &schedulerconfig.Plugins{}
			out.Profiles[i].Plugins = plugins
		}
		plugins.Filter.Disabled = append(plugins.Filter.Disabled, schedulerconfig.Plugin{Name: names.NodeResourcesFit})
	}
	return out
}
