package performance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sink keeps TestPhaseMeter's allocation alive.
var sink []byte

// TestPhaseMeter feeds the meter the pod events of a workload by hand: a
// phase starts at its first pod and ends when its pods-th pod is bound;
// pods of namespaces that name no profile (init) are not measured; a
// phase that did not end is reported by finish.
func TestPhaseMeter(t *testing.T) {
	profiles := t.TempDir()
	m := newPhaseMeter("NodeOnly10", "1000Nodes_Batching", 2, profiles)
	h := m.handler()
	pod := func(ns, name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	}
	h.OnAdd(pod("init", "i", "n1"), false)
	h.OnAdd(pod("stock-1", "a", ""), false)
	sink = make([]byte, 1<<20)
	h.OnAdd(pod("stock-1", "b", ""), false)
	h.OnUpdate(pod("stock-1", "a", ""), pod("stock-1", "a", "n1"))
	h.OnUpdate(pod("stock-1", "a", "n1"), pod("stock-1", "a", "n1")) // not a bind
	h.OnAdd(pod("celsched-1", "c", ""), false)
	h.OnUpdate(pod("stock-1", "b", ""), pod("stock-1", "b", "n2"))

	phases, err := m.finish()
	if err == nil || !strings.Contains(err.Error(), "celsched-1 (1 created, 0 of 2 bound)") || strings.Contains(err.Error(), "stock-1") {
		t.Errorf("finish: %v, want an error naming celsched-1 only", err)
	}
	if len(phases) != 1 {
		t.Fatalf("phases: %+v, want stock-1 only", phases)
	}
	p := phases[0]
	if diff := cmp.Diff([]string{"NodeOnly10", "1000Nodes_Batching", "stock-1"}, []string{p.TestCase, p.Workload, p.Namespace}); diff != "" {
		t.Errorf("phase names (-want +got):\n%s", diff)
	}
	if p.Pods != 2 {
		t.Errorf("phase of %d pods, want 2", p.Pods)
	}
	if p.AllocBytes < 1<<20 || p.AllocObjects == 0 {
		t.Errorf("phase allocated %d bytes in %d objects, want at least the 1 MiB allocated between its first pod and its last bind", p.AllocBytes, p.AllocObjects)
	}
	if p.WallSeconds < 0 || p.CPUSeconds < 0 || p.GCCPUSeconds < 0 {
		t.Errorf("phase %+v: a counter went backwards", p)
	}
	// A CPU profile of stock-1, a complete pprof file (gzip), and its
	// allocation profiles; no CPU profile of celsched-1, which started
	// while stock-1's ran (a process has one), but its allocation profile
	// at the start; nothing of init, which is not a phase.
	for _, name := range []string{"stock-1.pprof", "stock-1.allocs-start.pprof", "stock-1.allocs.pprof", "celsched-1.allocs-start.pprof"} {
		b, err := os.ReadFile(filepath.Join(profiles, "NodeOnly10_1000Nodes_Batching_"+name))
		if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("profile %s: %d bytes, %v; want a gzipped pprof file", name, len(b), err)
		}
	}
	if entries, _ := os.ReadDir(profiles); len(entries) != 4 {
		t.Errorf("%d profiles, want 4", len(entries))
	}
}
