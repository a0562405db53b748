package builder

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// GenerateOptions size a generated cluster.
type GenerateOptions struct {
	// Seed makes the cluster: the same seed and sizes give the same objects.
	Seed uint64
	// Nodes and Pods are how many of each (Pods is approached: pods come
	// in workloads of one to three replicas).
	Nodes, Pods int
	// Prefix starts the name of every object, and RunLabel (a label key)
	// with the value Prefix marks the namespaces, so that the policies
	// select only the generated namespaces.
	Prefix, RunLabel string
	// SchedulerName is the pods' profile.
	SchedulerName string
}

// Generated is a cluster generated for a differential test: nodes with
// zones, pools, taints, cordons and capacities; namespaces with team,
// tier, wave and tenant labels; pods with node selectors, required node
// affinity, tolerations and requests; the tenants' params ConfigMaps; the
// policies in force; and a change of them (Drafts replace the policies of
// their name, Deletions are removed).
type Generated struct {
	Nodes      []*corev1.Node
	Namespaces []*corev1.Namespace
	ConfigMaps []*corev1.ConfigMap
	// Pods are unbound, in creation order; replicas of a workload differ
	// only in their name.
	Pods      []*corev1.Pod
	Policies  []*schedv1alpha1.SchedulingPolicy
	Drafts    []*schedv1alpha1.SchedulingPolicy
	Deletions []string
	// RolloutPolicy is the name of the policy with a two-wave rollout
	// (waves "one" and "two", by the namespace label GenWaveLabel).
	RolloutPolicy string
}

// Labels of generated nodes and namespaces.
const (
	GenPoolLabel   = "celsched.io/pool"
	GenDiskLabel   = "celsched.io/disk"
	GenTeamLabel   = "celsched.io/team"
	GenTierLabel   = "celsched.io/tier"
	GenWaveLabel   = "celsched.io/wave"
	GenTenantLabel = "celsched.io/tenant"
	// GenHoldLabel on a pod of a dev namespace makes the hold policy hold it.
	GenHoldLabel = "celsched.io/hold"
	// GenAccelLabel on a pod makes the accelerator policy want a gpu node.
	GenAccelLabel = "celsched.io/accel"
)

// Taints of generated nodes.
var (
	genSpotTaint  = corev1.Taint{Key: "celsched.io/spot", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	genGPUTaint   = corev1.Taint{Key: "celsched.io/dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	genMaintTaint = corev1.Taint{Key: "celsched.io/maintenance", Effect: corev1.TaintEffectNoExecute}
)

var genZones = []string{"a", "b", "c"}

// Capacities. Small requests add up, over all the pods, to at most half
// the smallest node, and at most genMaxLarge large pods exist, each
// fitting only big nodes, where all of them fit together with every small
// pod: so whether a pod has a node does not depend on where the pods
// before it went, and an evaluation of pods created all at once agrees
// with one of pods created one at a time.
const (
	genSmallNodeMilliCPU = 2000
	genSmallNodeMemMi    = 4096
	genBigNodeCPU        = "32"
	genBigNodeMemory     = "64Gi"
	genLargeCPU          = "10"
	genLargeMemory       = "20Gi"
	genMaxLarge          = 3
	genHugeCPU           = "64"
	genHugeMemory        = "128Gi"
)

// Generate makes a cluster from a seed. The first nodes are fixed (a
// schedulable general node in each zone, the first two big, a gpu node
// and a spot node, both tainted) and so are the first workloads (a pod
// for each outcome the policies can give: see palette), so that a small
// cluster exercises every policy; the rest is drawn at random, and the
// pods are created in a random order.
func Generate(o GenerateOptions) *Generated {
	r := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	g := &Generated{}
	chance := func(p float64) bool { return r.Float64() < p }
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }

	type anchor struct {
		zone, pool string
		ssd, big   bool
	}
	anchors := []anchor{{"a", "general", true, true}, {"b", "general", false, true}, {"c", "general", true, false},
		{pick("a", "b"), "gpu", false, false}, {"c", "spot", false, false}}
	for i := range o.Nodes {
		name := fmt.Sprintf("%s-n%02d", o.Prefix, i)
		var a anchor
		if i < len(anchors) {
			a = anchors[i]
		} else {
			a = anchor{zone: pick(genZones...), pool: "general", ssd: chance(0.4), big: chance(0.15)}
			switch x := r.Float64(); {
			case x < 0.25:
				a.pool = "spot"
			case x < 0.4:
				a.pool = "gpu"
			}
		}
		labels := map[string]string{corev1.LabelHostname: name, corev1.LabelTopologyZone: a.zone, GenPoolLabel: a.pool}
		if a.ssd {
			labels[GenDiskLabel] = "ssd"
		}
		var taints []corev1.Taint
		switch {
		case a.pool == "gpu":
			taints = append(taints, genGPUTaint)
		case a.pool == "spot" && (i < len(anchors) || chance(0.7)):
			taints = append(taints, genSpotTaint)
		}
		cordoned := false
		if i >= len(anchors) {
			if chance(0.08) {
				taints = append(taints, genMaintTaint)
			}
			cordoned = chance(0.1)
		}
		cpu, mem := pick("2", "4", "8"), pick("4Gi", "8Gi", "16Gi")
		if a.big {
			cpu, mem = genBigNodeCPU, genBigNodeMemory
		}
		capacity := corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem),
			corev1.ResourcePods: resource.MustParse("110"),
		}
		g.Nodes = append(g.Nodes, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec:       corev1.NodeSpec{Taints: taints, Unschedulable: cordoned},
			Status:     corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
		})
	}

	// Namespaces, their labels in cycles (so that four of them have every
	// combination the policies tell apart): a wave (one, two, none), a
	// tenant with params every other one, a tier (prod, prod, dev, dev) and
	// a team.
	namespaces := max(4, o.Pods/8)
	for i := range namespaces {
		name := fmt.Sprintf("%s-ns%02d", o.Prefix, i)
		labels := map[string]string{
			corev1.LabelMetadataName: name, o.RunLabel: o.Prefix,
			GenTeamLabel: []string{"ml", "batch", "web", "ml", "web"}[i%5], GenTierLabel: []string{"prod", "prod", "dev", "dev"}[i%4],
		}
		if w := []string{"one", "two", ""}[i%3]; w != "" {
			labels[GenWaveLabel] = w
		}
		if i%2 == 0 {
			labels[GenTenantLabel] = "true"
			// Two zones, or one, or (rarely) a zone no node has.
			zones := pick("a,b", "b,c", "a,c", "a", "b", "c", "d")
			g.ConfigMaps = append(g.ConfigMaps, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "placement"},
				Data:       map[string]string{"zones": zones},
			})
		}
		g.Namespaces = append(g.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
	}

	// Pods, in workloads of one to three identical replicas.
	small := func() corev1.ResourceList {
		perPodMilli := max(1, genSmallNodeMilliCPU/2/max(1, o.Pods+3))
		perPodMi := max(1, genSmallNodeMemMi/2/max(1, o.Pods+3))
		return corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(1+r.IntN(perPodMilli)), resource.DecimalSI),
			corev1.ResourceMemory: resource.MustParse(fmt.Sprintf("%dMi", 1+r.IntN(perPodMi))),
		}
	}
	huge := func(cpu bool) corev1.ResourceList {
		req := small()
		if cpu {
			req[corev1.ResourceCPU] = resource.MustParse(genHugeCPU)
		} else {
			req[corev1.ResourceMemory] = resource.MustParse(genHugeMemory)
		}
		return req
	}
	spotToleration := corev1.Toleration{Key: genSpotTaint.Key, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}
	gpuToleration := corev1.Toleration{Key: genGPUTaint.Key, Operator: corev1.TolerationOpExists}
	ns := func(i int) string { return g.Namespaces[i%namespaces].Name }
	type workload struct {
		namespace    string
		labels       map[string]string
		nodeSelector map[string]string
		tolerations  []corev1.Toleration
		requests     corev1.ResourceList
	}
	// The palette: in the namespaces of the cycles above (0: wave one,
	// tenant, prod, ml; 1: wave two, prod, batch; 2: tenant, dev, web; 3:
	// wave one, dev, ml).
	palette := []workload{
		// Only zone c: wave one strands it once enforced.
		{namespace: ns(3), nodeSelector: map[string]string{corev1.LabelTopologyZone: "c"}, requests: small()},
		// Only zone c, and no node has room: no node either way.
		{namespace: ns(3), nodeSelector: map[string]string{corev1.LabelTopologyZone: "c"}, requests: huge(true)},
		// Held in a dev namespace.
		{namespace: ns(2), labels: map[string]string{GenHoldLabel: "true"}, requests: small()},
		// An accelerator wanted, the gpu taint not tolerated: no node for
		// the policy's sake and the taint's together.
		{namespace: ns(1), labels: map[string]string{GenAccelLabel: "gpu"}, requests: small()},
		// The same, tolerated: the gpu node.
		{namespace: ns(1), labels: map[string]string{GenAccelLabel: "gpu"}, tolerations: []corev1.Toleration{gpuToleration}, requests: small()},
		// Spot in production: refused; audited for the batch team.
		{namespace: ns(0), nodeSelector: map[string]string{GenPoolLabel: "spot"}, tolerations: []corev1.Toleration{spotToleration}, requests: small()},
		{namespace: ns(1), nodeSelector: map[string]string{GenPoolLabel: "spot"}, tolerations: []corev1.Toleration{spotToleration}, requests: small()},
		// Too much memory for any node.
		{namespace: ns(2), requests: huge(false)},
	}
	var workloads []workload
	large := 0
	for w := 0; w < max(len(palette), o.Pods); w++ {
		if w < len(palette) {
			workloads = append(workloads, palette[w])
			continue
		}
		wl := workload{namespace: ns(r.IntN(namespaces)), labels: map[string]string{}}
		switch x := r.Float64(); {
		case x < 0.12:
			wl.nodeSelector = map[string]string{corev1.LabelTopologyZone: pick(genZones...)}
		case x < 0.24:
			wl.nodeSelector = map[string]string{GenPoolLabel: pick("general", "spot", "gpu")}
		}
		if chance(0.35) {
			wl.tolerations = append(wl.tolerations, spotToleration)
		}
		if chance(0.2) {
			wl.tolerations = append(wl.tolerations, gpuToleration)
		}
		if chance(0.04) {
			wl.tolerations = append(wl.tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists})
		}
		wl.requests = small()
		switch x := r.Float64(); {
		case x < 0.06 && large < genMaxLarge:
			wl.requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(genLargeCPU), corev1.ResourceMemory: resource.MustParse(genLargeMemory)}
			large++
		case x < 0.08:
			wl.requests = huge(true)
		case x < 0.1:
			wl.requests = huge(false)
		}
		if chance(0.15) {
			wl.labels[GenAccelLabel] = "gpu"
		}
		if chance(0.08) {
			wl.labels[GenHoldLabel] = "true"
		}
		workloads = append(workloads, wl)
	}
	for w, wl := range workloads {
		spec := corev1.PodSpec{
			SchedulerName: o.SchedulerName,
			Containers:    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Requests: wl.requests}}},
			NodeSelector:  wl.nodeSelector,
			Tolerations:   wl.tolerations,
		}
		// Required node affinity for random workloads only (the palette's
		// outcomes are the policies').
		if w >= len(palette) {
			var req []corev1.NodeSelectorRequirement
			switch x := r.Float64(); {
			case x < 0.1:
				z := slices.Clone(genZones)
				r.Shuffle(len(z), func(i, j int) { z[i], z[j] = z[j], z[i] })
				req = append(req, corev1.NodeSelectorRequirement{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: z[:2]})
			case x < 0.2:
				req = append(req, corev1.NodeSelectorRequirement{Key: GenPoolLabel, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"spot"}})
			case x < 0.27:
				req = append(req, corev1.NodeSelectorRequirement{Key: GenDiskLabel, Operator: corev1.NodeSelectorOpExists})
			}
			if req != nil {
				spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
						NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: req}},
					},
				}}
			}
		}
		labels := maps.Clone(wl.labels)
		if labels == nil {
			labels = map[string]string{}
		}
		labels["app"] = fmt.Sprintf("w%03d", w)
		replicas := 1 + r.IntN(3)
		if wl.requests.Cpu().Cmp(resource.MustParse(genLargeCPU)) == 0 {
			replicas = 1 // genMaxLarge counts pods
		}
		for i := range max(1, min(replicas, o.Pods-len(g.Pods))) {
			g.Pods = append(g.Pods, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: wl.namespace, Name: fmt.Sprintf("w%03d-%d", w, i), Labels: maps.Clone(labels)},
				Spec:       *spec.DeepCopy(),
			})
		}
		if len(g.Pods) >= o.Pods && w >= len(palette)-1 {
			break
		}
	}
	r.Shuffle(len(g.Pods), func(i, j int) { g.Pods[i], g.Pods[j] = g.Pods[j], g.Pods[i] })

	g.policies(o)
	return g
}

// policies are the policies in force, and the change.
func (g *Generated) policies(o GenerateOptions) {
	run := func(kv ...string) map[string]string {
		m := map[string]string{o.RunLabel: o.Prefix}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	name := func(s string) string { return o.Prefix + "-" + s }
	pool := "node.metadata.labels[?'" + GenPoolLabel + "'].orValue('')"
	zone := "node.metadata.labels[?'" + corev1.LabelTopologyZone + "'].orValue('')"

	// Production pods off spot nodes; audited for the batch team.
	noSpot := MakePolicy(name("no-spot-prod")).NamespaceLabels(run(GenTierLabel, "prod")).
		Filter("not-spot", pool+" != 'spot'").
		Override(map[string]string{GenTeamLabel: "batch"}, schedv1alpha1.Audit)
	// Pods that ask for an accelerator go to gpu nodes.
	accel := MakePolicy(name("accel-on-gpu")).NamespaceLabels(run()).PodLabels(map[string]string{GenAccelLabel: "gpu"}).
		Filter("gpu", pool+" == 'gpu'")
	// Pods of dev namespaces labelled hold wait.
	hold := MakePolicy(name("hold-dev")).NamespaceLabels(run(GenTierLabel, "dev")).
		PreEnqueue("not-held", "!('"+GenHoldLabel+"' in pod.metadata.labels)", "held for review")
	// Out of zone c, rolled out in two waves.
	rollout := MakePolicy(name("leave-zone-c")).NamespaceLabels(run()).Audit().
		Filter("not-c", zone+" != 'c'").
		Wave("one", map[string]string{GenWaveLabel: "one"}, time.Hour).
		Wave("two", map[string]string{GenWaveLabel: "two"}, time.Hour)
	g.RolloutPolicy = name("leave-zone-c")
	// Tenants in the zones of their params.
	tenants := MakePolicy(name("tenant-zones")).NamespaceLabels(run(GenTenantLabel, "true")).
		ParamKind("v1", "ConfigMap").ParamRef("placement", "", schedv1alpha1.DenyAction).
		Filter("zone", zone+" in params.data['zones'].split(',')")
	// Preferences: zone a, ssd, and fewer pods.
	prefer := MakePolicy(name("prefer")).NamespaceLabels(run()).
		Score("zone-a", zone+" == 'a' ? 100 : 0", 2, schedv1alpha1.None).
		Score("ssd", "node.metadata.labels[?'"+GenDiskLabel+"'].orValue('') == 'ssd' ? 1 : 0", 1, schedv1alpha1.MinMax).
		Score("fewest-pods", "nodeInfo.podCount", 1, schedv1alpha1.MinMaxReverse)
	g.Policies = []*schedv1alpha1.SchedulingPolicy{noSpot.Obj(), accel.Obj(), hold.Obj(), rollout.Obj(), tenants.Obj(), prefer.Obj()}

	// The change: production off spot and off zone b for every team (the
	// override gone); accelerators anywhere with a gpu or an ssd; no more
	// holds; prefer zone b.
	g.Drafts = []*schedv1alpha1.SchedulingPolicy{
		MakePolicy(name("no-spot-prod")).NamespaceLabels(run(GenTierLabel, "prod")).
			Filter("not-spot", pool+" != 'spot'").Filter("not-b", zone+" != 'b'").Obj(),
		MakePolicy(name("accel-on-gpu")).NamespaceLabels(run()).PodLabels(map[string]string{GenAccelLabel: "gpu"}).
			Filter("gpu", pool+" == 'gpu' || node.metadata.labels[?'"+GenDiskLabel+"'].orValue('') == 'ssd'").Obj(),
		MakePolicy(name("prefer")).NamespaceLabels(run()).
			Score("zone-b", zone+" == 'b' ? 100 : 0", 2, schedv1alpha1.None).Obj(),
	}
	g.Deletions = []string{name("hold-dev")}
}

// Describe is a one-line account of the generated cluster, for a test's
// log.
func (g *Generated) Describe() string {
	count := func(ok func(*corev1.Node) bool) int {
		n := 0
		for _, x := range g.Nodes {
			if ok(x) {
				n++
			}
		}
		return n
	}
	pools := map[string]int{}
	for _, n := range g.Nodes {
		pools[n.Labels[GenPoolLabel]]++
	}
	var ps []string
	for p, n := range pools {
		ps = append(ps, fmt.Sprintf("%s %d", p, n))
	}
	sort.Strings(ps)
	return fmt.Sprintf("%d nodes (%s; %d tainted, %d cordoned), %d namespaces, %d pods, %d policies",
		len(g.Nodes), strings.Join(ps, ", "), count(func(n *corev1.Node) bool { return len(n.Spec.Taints) > 0 }),
		count(func(n *corev1.Node) bool { return n.Spec.Unschedulable }), len(g.Namespaces), len(g.Pods), len(g.Policies))
}
