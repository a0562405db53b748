package engine

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/google/cel-go/common/types"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// TestMemoTable: a slot of an expression with several ids keeps one in
// the slot, two to four in one bucket, and once a fifth of the same
// generation comes, the results of the memoBuckets*memoWays newest pod
// keys in a set of buckets, none older; one with a single id keeps its newest result; a slot
// never returns another expression's result (a slot reused after its
// policy went) nor one of another key, params object or NodeInfo
// generation; and concurrent stores and loads are safe (run under -race by
// make test).
func TestMemoTable(t *testing.T) {
	t.Parallel()
	var table memoTable
	a, b := &expr{slot: 3, memo: memoPodAndNode}, &expr{slot: 3, memo: memoPodAndNode}
	places := func(e *expr) *memoPlaces { return &(*table.slots.Load())[e.slot] }
	big := func(e *expr) bool { return places(e).big.Load() != nil }
	table.storeResult(&memoResult{e: a, id: memoID{key: 0}, val: types.Int(0)})
	if places(a).small.Load() != nil {
		t.Error("one id took a bucket")
	}
	for key := uint64(1); key < memoWays; key++ {
		table.storeResult(&memoResult{e: a, id: memoID{key: key}, val: types.Int(key)})
		if places(a).small.Load() == nil {
			t.Errorf("%d ids kept without a bucket", key+1)
		}
	}
	if big(a) {
		t.Errorf("%d ids took more than a bucket", memoWays)
	}
	table.storeResult(&memoResult{e: a, id: memoID{key: memoWays}, val: types.Int(memoWays)})
	if !big(a) {
		t.Errorf("%d ids of one generation kept in one bucket", memoWays+1)
	}
	for key := range uint64(memoWays + 1) {
		if r := table.load(a, memoID{key: key}); r == nil || r.val != types.Int(key) {
			t.Errorf("key %d after the set grew: %v", key, r)
		}
	}
	const kept = memoBuckets * memoWays
	const stores = 3 * kept
	for key := range uint64(stores) {
		table.storeResult(&memoResult{e: a, id: memoID{key: key}, val: types.Int(key)})
	}
	for key := range uint64(stores) {
		r := table.load(a, memoID{key: key})
		if evicted := key < stores-kept; (r == nil) != evicted {
			t.Errorf("key %d: result %v, want evicted=%v", key, r, evicted)
		}
		if r != nil && r.val != types.Int(key) {
			t.Errorf("key %d: %v", key, r.val)
		}
	}
	if r := table.load(a, memoID{key: stores - 1, params: 1}); r != nil {
		t.Errorf("a result for another params object: %v", r.val)
	}
	if r := table.load(b, memoID{key: stores - 1}); r != nil {
		t.Errorf("another expression in the same slot read %v", r.val)
	}
	for key := range uint64(kept) {
		table.storeResult(&memoResult{e: b, id: memoID{key: key}, val: types.String("b")})
	}
	for key := range uint64(stores) {
		if r := table.load(a, memoID{key: key}); r != nil {
			t.Errorf("the previous owner's result for key %d survived the new owner's stores: %v", key, r.val)
		}
	}
	for key := range uint64(kept) {
		if r := table.load(b, memoID{key: key}); r == nil || r.val != types.String("b") {
			t.Errorf("b, key %d: %v", key, r)
		}
	}

	// Results are per generation; an older generation's result is
	// replaced first, in the slot as in a bucket.
	c := &expr{slot: 5, memo: memoPodAndNodeInfo}
	table.storeResult(&memoResult{e: c, id: memoID{key: 1, gen: 9}, val: types.Int(9)})
	table.storeResult(&memoResult{e: c, id: memoID{key: 1, gen: 10}, val: types.Int(1)})
	if places(c).small.Load() != nil {
		t.Error("a result of an older generation was kept in a bucket")
	}
	if r := table.load(c, memoID{key: 1, gen: 9}); r != nil {
		t.Errorf("the older generation's result outlived the newer: %v", r.val)
	}
	table.storeResult(&memoResult{e: c, id: memoID{key: 2, gen: 10}, val: types.Int(2)})
	table.storeResult(&memoResult{e: c, id: memoID{key: 1, gen: 11}, val: types.Int(3)})
	if r := table.load(c, memoID{key: 1, gen: 11}); r == nil || r.val != types.Int(3) {
		t.Errorf("generation 11: %v", r)
	}
	if r := table.load(c, memoID{key: 1, gen: 10}); r == nil || r.val != types.Int(1) {
		t.Errorf("generation 10: %v", r)
	}
	if r := table.load(c, memoID{key: 3, gen: 10}); r != nil {
		t.Errorf("a result of another key: %v", r.val)
	}
	for key := uint64(2); key <= memoWays; key++ {
		table.storeResult(&memoResult{e: c, id: memoID{key: key, gen: 11}, val: types.Int(key)})
	}
	if big(c) {
		t.Error("the bucket grew to keep an older generation's result")
	}
	for key := uint64(1); key <= 2; key++ {
		if r := table.load(c, memoID{key: key, gen: 10}); r != nil {
			t.Errorf("an older generation's result outlived %d of the newer: %v", memoWays, r.val)
		}
	}

	// An expression with one id per node version keeps its newest result;
	// a new generation replaces the older.
	d := &expr{slot: 6, memo: memoNodeInfo}
	table.storeResult(&memoResult{e: d, id: memoID{gen: 10}, val: types.Int(10)})
	if r := table.load(d, memoID{gen: 10}); r == nil || r.val != types.Int(10) {
		t.Errorf("generation 10: %v", r)
	}
	table.storeResult(&memoResult{e: d, id: memoID{gen: 11}, val: types.Int(11)})
	if r := table.load(d, memoID{gen: 10}); r != nil {
		t.Errorf("an older generation's result: %v", r.val)
	}
	if r := table.load(d, memoID{gen: 11}); r == nil || r.val != types.Int(11) {
		t.Errorf("generation 11: %v", r)
	}
	if r := table.load(&expr{slot: 6, memo: memoNodeInfo}, memoID{gen: 11}); r != nil {
		t.Errorf("another expression in the same slot read %v", r.val)
	}

	// Lists of one way share its places: theirs grow when they hold more
	// ids between them than a bucket.
	var way memoPlaces
	l1, l2 := &expr{slot: 1, memo: memoNode}, &expr{slot: 5, memo: memoNode}
	way.store(&table.memoOrder, &memoResult{e: l1, id: memoID{key: 1}, val: types.Int(1)})
	for key := range uint64(memoWays) {
		way.store(&table.memoOrder, &memoResult{e: l2, id: memoID{key: key}, val: types.Int(-key)})
	}
	if r := way.load(l1, memoID{key: 1}); r == nil || r.val != types.Int(1) {
		t.Errorf("list 1: %v", r)
	}
	for key := range uint64(memoWays) {
		if r := way.load(l2, memoID{key: key}); r == nil || r.val != types.Int(-key) {
			t.Errorf("list 2, key %d: %v", key, r)
		}
	}

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			e := &expr{slot: g * 7, memo: memoPodAndNodeInfo}
			for key := range uint64(200) {
				table.storeResult(&memoResult{e: e, id: memoID{key: key % 20, gen: int64(key % 2)}, val: types.Int(key % 20)})
				if r := table.load(e, memoID{key: key % 20, gen: int64(key % 2)}); r != nil && r.val != types.Int(key%20) {
					t.Errorf("slot %d key %d: %v", e.slot, key%20, r.val)
				}
			}
		})
	}
	wg.Wait()
}

// TestSmallMemo: a table of a converter with SmallMemo keeps at most a
// bucket of results per expression, the oldest replaced first, and never
// grows a set.
func TestSmallMemo(t *testing.T) {
	t.Parallel()
	table := memoTable{memoOrder: memoOrder{small: true}}
	e := &expr{slot: 2, memo: memoPodAndNode}
	const stores = 4 * memoWays
	for key := range uint64(stores) {
		table.storeResult(&memoResult{e: e, id: memoID{key: key}, val: types.Int(key)})
	}
	if (*table.slots.Load())[e.slot].big.Load() != nil {
		t.Fatalf("%d ids grew a set", stores)
	}
	for key := range uint64(stores) {
		r := table.load(e, memoID{key: key})
		if evicted := key < stores-memoWays; (r == nil) != evicted {
			t.Errorf("key %d: result %v, want evicted=%v", key, r, evicted)
		}
	}
	// A converter's SmallMemo reaches the tables of the nodes it converts.
	conv := NewConverter(testEnv(t), 0).SmallMemo()
	in := nodeInput(t, conv, "n1", nil, nil)
	if in.memo == nil || !in.memo.small {
		t.Errorf("a node of a SmallMemo converter: memo %+v, want small", in.memo)
	}
}

// TestMemoKinds: how an expression's results are kept follows what it
// reads; a policy that reads the pod's name keeps none per pod (every pod
// has its own).
func TestMemoKinds(t *testing.T) {
	t.Parallel()
	compiler := NewCompiler(testEnv(t))
	for expression, want := range map[string]memoKind{
		"node.metadata.name != ''":                                    memoNode,
		"nodeInfo.podCount < 10":                                      memoNodeInfo,
		"pod.metadata.labels['app'] == node.metadata.name":            memoPodAndNode,
		"nodeInfo.pods.all(p, p.name != pod.metadata.labels['app'])":  memoPodAndNodeInfo,
		"pod.metadata.name != node.metadata.name":                     notMemoized,
		"pod.status.phase == 'Pending' || node.metadata.name == 'n1'": notMemoized,
	} {
		p := compiler.Compile(builder.MakePolicy("p").Filter("f", expression).Obj(), CompileOptions{})
		if err := p.Err(); err != nil {
			t.Fatalf("%s: %v", expression, err)
		}
		if got := p.filters[0].memo; got != want {
			t.Errorf("%s: memo kind %d, want %d", expression, got, want)
		}
	}
}

// TestMemoSlots: every memoized expression of a policy evaluated per node
// (variables, filters and their messageExpressions, scores) has a slot of
// its own, so that no two share a node's memo list.
func TestMemoSlots(t *testing.T) {
	t.Parallel()
	p := NewCompiler(testEnv(t)).Compile(builder.MakePolicy("p").
		Variable("zone", "node.metadata.?labels[?'zone'].orValue('')").
		FilterMsg("zone", "variables.zone != 'c'", "", "'not in zone ' + variables.zone").
		Score("spot", "node.metadata.name.size()", 1, "").Obj(), CompileOptions{})
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	exprs := []*expr{&p.variables[0].expr, &p.filters[0].expr, p.filters[0].messageExpression, &p.scores[0].expr}
	slots := map[int]bool{}
	for i, e := range exprs {
		if e.memo == notMemoized {
			t.Fatalf("expression %d is not memoized", i)
		}
		slots[e.slot] = true
	}
	if len(slots) != len(exprs) {
		t.Errorf("%d memoized expressions share %d slots", len(exprs), len(slots))
	}
}

// TestMemoNumbersPerEnvironment: the memo numbering belongs to the
// Environment. Policies compiled over one Environment number their slots
// and lists from it, and their list's outcomes are kept; a list of policies
// compiled over two Environments, whose numbers may collide in a node's
// memo, is not kept.
func TestMemoNumbersPerEnvironment(t *testing.T) {
	t.Parallel()
	other, err := NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	policy := func(env *Environment, name string) *CompiledPolicy {
		t.Helper()
		p := NewCompiler(env).Compile(builder.MakePolicy(name).Filter("zone", "node.metadata.?labels[?'zone'].orValue('') != 'c'").Obj(), CompileOptions{})
		if err := p.Err(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b, c := policy(testEnv(t), "a"), policy(testEnv(t), "b"), policy(other, "c")
	if a.numbers != testEnv(t).memo || c.numbers != other.memo {
		t.Fatal("a policy is not numbered by the Environment it was compiled over")
	}
	if a.filters[0].slot == b.filters[0].slot {
		t.Errorf("two policies of one Environment share slot %d", a.filters[0].slot)
	}
	if l := NewSnapshot(a, b).List(PointFilter, []*CompiledPolicy{a, b}); !l.Kept() {
		t.Error("the list of policies of one Environment is not kept")
	}
	if l := NewSnapshot(a, c).List(PointFilter, []*CompiledPolicy{a, c}); l.Kept() {
		t.Error("the list of policies of two Environments is kept")
	}
}

// TestMemoKeyLabels: a policy that reads the pod's labels only through
// constant keys keys its results on those labels alone (and on whether
// the pod has labels at all), so the pods of a StatefulSet or a Job, whose
// own labels name each pod, share them; one that uses the labels
// otherwise keys them on every label.
func TestMemoKeyLabels(t *testing.T) {
	t.Parallel()
	env := testEnv(t)
	compiler := NewCompiler(env)
	conv := NewConverter(env, 0)
	pod := func(labels map[string]string) *PodInput {
		in, err := conv.Pod(makePod("ns", "p", labels), nil)
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	web0 := map[string]string{"app": "web", "statefulset.kubernetes.io/pod-name": "web-0"}
	web1 := map[string]string{"app": "web", "statefulset.kubernetes.io/pod-name": "web-1"}
	api0 := map[string]string{"app": "api", "statefulset.kubernetes.io/pod-name": "web-0"}
	for _, tc := range []struct {
		expressions []string
		keys        []string // nil: every label
	}{
		{[]string{"pod.metadata.labels['app'] == node.metadata.name"}, []string{"app"}},
		{[]string{"pod.metadata.?labels[?'app'].orValue('') == node.metadata.name"}, []string{"app"}},
		{[]string{"pod.metadata.labels.app == node.metadata.name", "'tier' in pod.metadata.labels || has(pod.metadata.labels.zone) || node.metadata.name == ''"}, []string{"app", "tier", "zone"}},
		{[]string{"pod.metadata.labels.exists(k, k == node.metadata.name)"}, nil},
		{[]string{"pod.metadata.labels['app'] == node.metadata.name", "size(pod.metadata.labels) > 1 || node.metadata.name == ''"}, nil},
		{[]string{"has(pod.metadata.labels) && pod.metadata.labels['app'] == node.metadata.name"}, nil},
		{[]string{"cel.bind(l, pod.metadata.labels, l['app'] == node.metadata.name)"}, nil},
	} {
		b := builder.MakePolicy("p")
		for i, e := range tc.expressions {
			b = b.Filter(fmt.Sprintf("f%d", i), e)
		}
		p := compiler.Compile(b.Obj(), CompileOptions{})
		if err := p.Err(); err != nil {
			t.Fatalf("%v: %v", tc.expressions, err)
		}
		if !slices.Equal(p.signs.labels, tc.keys) || p.signs.labelsWhole != (tc.keys == nil) {
			t.Errorf("%v: label keys %v (whole %v), want %v", tc.expressions, p.signs.labels, p.signs.labelsWhole, tc.keys)
		}
		key := func(in *PodInput) uint64 {
			k, ok := in.key(&p.signs)
			if !ok {
				t.Fatalf("%v: no key", tc.expressions)
			}
			return k
		}
		if k0, k1 := key(pod(web0)), key(pod(web1)); (k0 == k1) != (tc.keys != nil) {
			t.Errorf("%v: pods differing in a label read by no key have keys %d and %d", tc.expressions, k0, k1)
		}
		if key(pod(web0)) == key(pod(api0)) {
			t.Errorf("%v: pods differing in app share a key", tc.expressions)
		}
		if tc.keys != nil && key(pod(nil)) == key(pod(map[string]string{"other": "x"})) {
			t.Errorf("%v: a pod without labels shares a key with one without app", tc.expressions)
		}
	}
}

// TestListRememberCopiesRaw: a list keeps its own copy of the raw scores
// it is given (beside its result for up to 8 rules, in a slice of its
// own beyond), so the caller's table can be reused, and allocates the
// result once.
func TestListRememberCopiesRaw(t *testing.T) {
	// Not parallel: testing.AllocsPerRun counts the process's allocations.
	env := testEnv(t)
	p := NewCompiler(env).Compile(builder.MakePolicy("score").
		Score("zone", "node.metadata.?labels[?'zone'].orValue('') == 'a' ? 1 : 0", 1, schedv1alpha1.None).Obj(), CompileOptions{})
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	list := NewSnapshot(p).List(PointScore, []*CompiledPolicy{p})
	conv := NewConverter(env, 0)
	in, err := conv.Pod(makePod("team-a", "web-0", nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 8, 9, 20} {
		node, err := conv.NodeInput(makeNode(fmt.Sprintf("node-%d", n), map[string]string{"zone": "a"}), 0, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		raw := make([]float64, n)
		for i := range raw {
			raw[i] = float64(i + 1)
		}
		want := slices.Clone(raw)
		list.Remember(in, &node, ListOutcome{Raw: raw[:len(raw):len(raw)]})
		for i := range raw {
			raw[i] = -1
		}
		o := list.Cached(in, &node)
		if o == nil {
			t.Fatalf("%d raw values: not remembered", n)
		}
		if !slices.Equal(o.Raw, want) || (o.Raw == nil) != (raw == nil) {
			t.Errorf("%d raw values: remembered %v, want %v", n, o.Raw, want)
		}
		// One object per outcome, and a slice beside it past 8 values.
		wantAllocs := 1.0
		if n > 8 {
			wantAllocs = 2
		}
		if got := testing.AllocsPerRun(20, func() { list.Remember(in, &node, ListOutcome{Raw: raw}) }); got != wantAllocs {
			t.Errorf("%d raw values: Remember allocates %v times, want %v", n, got, wantAllocs)
		}
	}
}
