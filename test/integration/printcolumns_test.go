package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
	"github.com/celsched/celsched/test/builder"
)

// TestPrinterColumns: `kubectl get schedpol` (the API server's Table) shows
// where a policy is enforced now (status.enforcement: a rolling-out
// policy is Audit until a wave is promoted, then enforced in that wave;
// a policy with overrides says how many), its rollout phase and its
// drifted pods, from status.
func TestPrinterColumns(t *testing.T) {
	createNamespace(t, "columns", map[string]string{"columns-wave": "one"})
	p := builder.MakePolicy("columns-rollout").Audit().NamespaceLabels(map[string]string{"columns-wave": "one"}).
		Filter("any", "true").Wave("one", map[string]string{"columns-wave": "one"}, time.Hour).Obj()
	applyPolicy(t, p)
	waitRollout(t, p.Name, "progressing", func(st *schedv1alpha1.RolloutStatus) bool { return st.Phase == schedv1alpha1.RolloutProgressing })

	table := policyTable(t, p.Name)
	var names []string
	for _, c := range table.ColumnDefinitions {
		names = append(names, c.Name)
	}
	enforcement, rollout := slices.Index(names, "Enforcement"), slices.Index(names, "Rollout")
	if enforcement < 0 || rollout < 0 || !slices.Contains(names, "Drifted") || len(table.Rows) != 1 {
		t.Fatalf("columns %v, %d row(s); want Enforcement, Rollout and Drifted, one row", names, len(table.Rows))
	}
	if cells := table.Rows[0].Cells; cells[rollout] != string(schedv1alpha1.RolloutProgressing) {
		t.Errorf("row %v: want Rollout %s", cells, schedv1alpha1.RolloutProgressing)
	}
	waitCell(t, p.Name, enforcement, "Audit")

	// Once its wave is promoted, the policy is enforced there, and the
	// column says so (spec.enforcement stays Audit).
	requested(t, runCLI(t, "rollout", "promote", "--kubeconfig", kubeconfig, p.Name))
	waitRollout(t, p.Name, "completed", func(st *schedv1alpha1.RolloutStatus) bool { return st.Phase == schedv1alpha1.RolloutCompleted })
	waitCell(t, p.Name, enforcement, "Enforce in 1/1 waves")

	// Without a rollout: spec.enforcement and its overrides.
	o := builder.MakePolicy("columns-overrides").Audit().NamespaceLabels(map[string]string{"columns-wave": "one"}).
		Filter("any", "true").Override(map[string]string{"columns-wave": "one"}, schedv1alpha1.Enforce).Obj()
	applyPolicy(t, o)
	waitCell(t, o.Name, enforcement, "Audit + 1 override")
}

// waitCell waits until the policy's row shows want in column i.
func waitCell(t *testing.T, name string, i int, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cells := policyTable(t, name).Rows[0].Cells
		if cells[i] == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("row %v: want %q in column %d", cells, want, i)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// policyTable gets a SchedulingPolicy as the API server's Table, as
// `kubectl get schedpol` shows it.
func policyTable(t *testing.T, name string) *metav1.Table {
	t.Helper()
	httpClient, err := rest.HTTPClientFor(testConfig)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("%s/apis/%s/schedulingpolicies/%s", strings.TrimSuffix(testConfig.Host, "/"), schedv1alpha1.GroupVersion, name)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;g=meta.k8s.io;v=v1")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s as a Table: %v %d %s", url, err, resp.StatusCode, data)
	}
	table := &metav1.Table{}
	if err := json.Unmarshal(data, table); err != nil {
		t.Fatal(err)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("%d row(s) for %s, want one", len(table.Rows), name)
	}
	return table
}
