package engine

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// maxTombstones bounds how many deleted policy UIDs a Registry remembers.
const maxTombstones = 4096

// Registry holds the compiled form of every SchedulingPolicy as an immutable
// Snapshot behind an atomic pointer: readers take one snapshot per
// scheduling cycle and never lock; writers recompile only the policy that
// changed and publish a new snapshot.
//
// Several event streams may feed one registry (the controller's cache and
// the scheduler's own informer): Upsert never replaces a version with an
// older one of the same object, and a deleted object is not brought back by
// a late event about it.
type Registry struct {
	compiler *Compiler

	mu      sync.Mutex // serializes writers
	current atomic.Pointer[Snapshot]
	// deleted holds the UIDs of deleted policies, oldest first in
	// deletedOrder; guarded by mu.
	deleted      map[ktypes.UID]struct{}
	deletedOrder []ktypes.UID
}

// NewRegistry returns an empty registry.
func NewRegistry(compiler *Compiler) *Registry {
	r := &Registry{compiler: compiler, deleted: map[ktypes.UID]struct{}{}}
	r.current.Store(&Snapshot{byName: map[string]*CompiledPolicy{}})
	return r
}

// Snapshot returns the current snapshot. It never changes; take one per
// scheduling cycle.
func (r *Registry) Snapshot() *Snapshot {
	return r.current.Load()
}

// Upsert compiles a policy as stored in the API server and publishes it,
// replacing any previous version, and returns the compiled policy (with its
// compile errors, if any). A version already in the registry, or older than
// the one there (same UID, lower resourceVersion), is not compiled again:
// Upsert returns what the registry holds. A policy deleted before (by UID)
// is ignored and Upsert returns nil.
func (r *Registry) Upsert(policy *schedv1alpha1.SchedulingPolicy) *CompiledPolicy {
	if old := r.Snapshot().Get(policy.Name); old != nil && !newer(policy, old) {
		return old
	}
	compiled := r.compiler.Compile(policy, CompileOptions{Stored: true})

	r.mu.Lock()
	defer r.mu.Unlock()
	if _, gone := r.deleted[policy.UID]; gone && policy.UID != "" {
		return nil
	}
	cur := r.current.Load()
	if old := cur.Get(policy.Name); old != nil && !newer(policy, old) {
		return old // a concurrent writer published this version or a newer one
	}
	r.current.Store(cur.with(compiled))
	return compiled
}

// newer says whether policy is a different object than old or a later
// version of it.
func newer(policy *schedv1alpha1.SchedulingPolicy, old *CompiledPolicy) bool {
	if old.UID != policy.UID || policy.ResourceVersion == "" {
		return true
	}
	cmp, err := resourceversion.CompareResourceVersion(policy.ResourceVersion, old.ResourceVersion)
	if err != nil {
		return policy.ResourceVersion != old.ResourceVersion
	}
	return cmp > 0
}

// Delete removes a policy and remembers its UID, so that a late event about
// the deleted object does not bring it back. With a UID, only that object
// is removed (not a policy re-created under the same name); without one,
// whatever the name holds. It says whether a policy was removed.
func (r *Registry) Delete(name string, uid ktypes.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if uid != "" {
		r.tombstone(uid)
	}
	cur := r.current.Load()
	old := cur.Get(name)
	if old == nil || (uid != "" && old.UID != uid) {
		return false
	}
	r.tombstone(old.UID)
	r.current.Store(cur.without(name))
	return true
}

// tombstone remembers a deleted UID; r.mu is held.
func (r *Registry) tombstone(uid ktypes.UID) {
	if _, ok := r.deleted[uid]; ok || uid == "" {
		return
	}
	if len(r.deletedOrder) == maxTombstones {
		delete(r.deleted, r.deletedOrder[0])
		r.deletedOrder = r.deletedOrder[1:]
	}
	r.deleted[uid] = struct{}{}
	r.deletedOrder = append(r.deletedOrder, uid)
}

// Snapshot is an immutable set of compiled policies.
type Snapshot struct {
	policies []*CompiledPolicy // sorted by name
	byName   map[string]*CompiledPolicy
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

// Policies returns the policies in name order. The slice must not be
// modified.
func (s *Snapshot) Policies() []*CompiledPolicy { return s.policies }

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

// Match is a policy that applies to a pod. Err, when set, is the policy's
// compile error or the error of one of its match conditions: the policy is
// treated as matching, and the caller applies its failurePolicy.
type Match struct {
	Policy *CompiledPolicy
	Err    error
}

// Match returns the policies that apply to the pod, in name order: those
// whose scheduler names and selectors match and whose match conditions are
// true.
func (s *Snapshot) Match(ctx context.Context, in *PodInput) []Match {
	var out []Match
	for _, p := range s.policies {
		if !p.MatchesSelectors(in) {
			continue
		}
		ok, err := p.matchConditions(ctx, in)
		if ok || err != nil {
			out = append(out, Match{Policy: p, Err: err})
		}
	}
	return out
}
