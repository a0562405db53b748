package engine

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// Registry holds the compiled form of every SchedulingPolicy as an immutable
// Snapshot behind an atomic pointer: readers take one snapshot per
// scheduling cycle and never lock; the writer recompiles only the policy
// that changed and publishes a new snapshot.
//
// A registry has one writer: the event handler on the scheduler's own
// SchedulingPolicy informer (celplugins.PolicyFeed), which sees every
// object's events in order. So a registry needs no tombstones or version
// comparisons: the last event about a name is the truth.
type Registry struct {
	compiler *Compiler

	mu      sync.Mutex // serializes writers, should there ever be several
	current atomic.Pointer[Snapshot]
	// explain: compile for explanations too (ExplainRules).
	explain atomic.Bool
	// compilations counts Upsert's compilations (Compilations).
	compilations atomic.Int64
}

// ExplainRules makes the registry compile the policies it gets from now on
// so that a Why can explain their rules (CompileOptions.Explain: about
// 25 KB more per policy). Call it before the policies are fed.
func (r *Registry) ExplainRules() { r.explain.Store(true) }

// NewRegistry returns an empty registry.
func NewRegistry(compiler *Compiler) *Registry {
	r := &Registry{compiler: compiler}
	r.current.Store(&Snapshot{byName: map[string]*CompiledPolicy{}})
	return r
}

// Snapshot returns the current snapshot. It never changes; take one per
// scheduling cycle.
func (r *Registry) Snapshot() *Snapshot {
	return r.current.Load()
}

// Upsert compiles a policy as stored in the API server and publishes it,
// replacing any previous version of the name, and returns the compiled
// policy (with its compile errors, if any). The spec of an object only
// changes with its generation, so a version of the same object (UID) and
// generation as the one held (a status or metadata update, a resync) is
// not compiled again. What status decides (the waves a rollout enforces)
// is resolved again on the program held (WithRollout): a promotion, a
// pause or an abort compiles nothing and keeps every remembered result.
func (r *Registry) Upsert(policy *schedv1alpha1.SchedulingPolicy) *CompiledPolicy {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.current.Load()
	if old := cur.Get(policy.Name); old != nil && old.UID == policy.UID && old.Generation == policy.Generation && policy.Generation != 0 {
		p := old.WithRollout(policy)
		if p != old {
			r.current.Store(cur.with(p))
		}
		return p
	}
	compiled := r.compiler.Compile(policy, CompileOptions{Stored: true, Explain: r.explain.Load()})
	r.compilations.Add(1)
	r.current.Store(cur.with(compiled))
	return compiled
}

// Compilations counts the policies the registry has compiled.
func (r *Registry) Compilations() int64 { return r.compilations.Load() }

// Delete removes a policy by name, and says whether there was one.
func (r *Registry) Delete(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.current.Load()
	if cur.Get(name) == nil {
		return false
	}
	r.current.Store(cur.without(name))
	return true
}

// Snapshot is an immutable set of compiled policies.
type Snapshot struct {
	policies []*CompiledPolicy // sorted by name
	byName   map[string]*CompiledPolicy
	// lists are the PolicyLists of the snapshot's cycles. Key: point and
	// policy names. Bound: maxLists. Invalidated with the snapshot (any
	// policy change makes a new one). Written by the first cycle that
	// applies that set of policies.
	lists     sync.Map
	listCount atomic.Int32
}

// NewSnapshot returns a snapshot of the given policies, e.g. for dry-run
// evaluation of files. Later policies replace earlier ones of the same name.
func NewSnapshot(policies ...*CompiledPolicy) *Snapshot {
	s := &Snapshot{byName: map[string]*CompiledPolicy{}}
	for _, p := range policies {
		s = s.with(p)
	}
	return s
}

// Len is the number of policies.
func (s *Snapshot) Len() int { return len(s.policies) }

// Get returns the named policy, or nil.
func (s *Snapshot) Get(name string) *CompiledPolicy { return s.byName[name] }

// ReadsPodGroup says whether an expression of some policy reads podGroup:
// only then do the plugins resolve a pod's group.
func (s *Snapshot) ReadsPodGroup() bool {
	for _, p := range s.policies {
		if p.ReadsPodGroup() {
			return true
		}
	}
	return false
}

// Policies returns the policies in name order. The slice must not be
// modified.
func (s *Snapshot) Policies() []*CompiledPolicy { return s.policies }

// With returns a snapshot with p in place of the policy of its name (or
// added): e.g. a policy with a wave enforced (WithWaveEnforced), to ask
// what the policies would do then.
func (s *Snapshot) With(p *CompiledPolicy) *Snapshot { return s.with(p) }

func (s *Snapshot) with(p *CompiledPolicy) *Snapshot {
	byName := make(map[string]*CompiledPolicy, len(s.byName)+1)
	for k, v := range s.byName {
		byName[k] = v
	}
	byName[p.Name] = p
	i, found := slices.BinarySearchFunc(s.policies, p.Name, byPolicyName)
	policies := slices.Clone(s.policies)
	if found {
		policies[i] = p
	} else {
		policies = slices.Insert(policies, i, p)
	}
	return &Snapshot{policies: policies, byName: byName}
}

func (s *Snapshot) without(name string) *Snapshot {
	byName := make(map[string]*CompiledPolicy, len(s.byName))
	for k, v := range s.byName {
		if k != name {
			byName[k] = v
		}
	}
	policies := slices.DeleteFunc(slices.Clone(s.policies), func(p *CompiledPolicy) bool { return p.Name == name })
	return &Snapshot{policies: policies, byName: byName}
}

func byPolicyName(p *CompiledPolicy, name string) int { return strings.Compare(p.Name, name) }

// Match matches every policy against a pod, in name order (a parameterized
// policy once per params object found, see CompiledPolicy.MatchAll), and returns
// those that apply (CompiledPolicy.Match): the ones whose selectors and
// match conditions select the pod, and the ones that apply with an Error
// decision (a compile or match condition error under failurePolicy Fail).
// Policies skipped under Ignore are left out; their errors are lost unless
// the caller asks with ignored.
func (s *Snapshot) Match(ctx context.Context, in *PodInput, ignored func(MatchResult)) []MatchResult {
	// The results are gathered in a pooled scratch slice and returned in
	// one of their own size: a tenth of a hundred policies matching a pod
	// costs ten results, not room for a hundred (a result is 160 bytes).
	scratch := matchScratch.Get().(*[]MatchResult)
	out := (*scratch)[:0]
	add := func(m MatchResult) {
		switch {
		case m.Matches:
			out = append(out, m)
		case len(m.Decision.Ignored) > 0 && ignored != nil:
			ignored(m)
		}
	}
	for _, p := range s.policies {
		if p.paramSpec == nil {
			m := p.Match(ctx, in) // without allocating MatchAll's slice
			m.of = p
			add(m)
			continue
		}
		matches := p.MatchAll(ctx, in)
		for i := range matches {
			matches[i].of = p
			add(matches[i])
		}
	}
	var res []MatchResult
	if len(out) > 0 {
		res = slices.Clone(out)
	}
	clear(out) // the pool keeps no policy, error or message alive
	*scratch = out[:0]
	matchScratch.Put(scratch)
	return res
}

// matchScratch holds Snapshot.Match's scratch slices. Bound: one per
// concurrent Match (sync.Pool drops them at GC). Written by Match only.
var matchScratch = sync.Pool{New: func() any { return new([]MatchResult) }}
