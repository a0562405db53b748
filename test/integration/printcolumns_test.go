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
// a rolling-out policy's rollout phase beside its spec.enforcement, and
// its drifted pods, from status.
func TestPrinterColumns(t *testing.T) {
	createNamespace(t, "columns", map[string]string{"columns-wave": "one"})
	p := builder.MakePolicy("columns-rollout").Audit().NamespaceLabels(map[string]string{"columns-wave": "one"}).
		Filter("any", "true").Wave("one", map[string]string{"columns-wave": "one"}, time.Hour).Obj()
	applyPolicy(t, p)
	waitRollout(t, p.Name, "progressing", func(st *schedv1alpha1.RolloutStatus) bool { return st.Phase == schedv1alpha1.RolloutProgressing })

	httpClient, err := rest.HTTPClientFor(testConfig)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("%s/apis/%s/schedulingpolicies/%s", strings.TrimSuffix(testConfig.Host, "/"), schedv1alpha1.GroupVersion, p.Name)
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
	var names []string
	for _, c := range table.ColumnDefinitions {
		names = append(names, c.Name)
	}
	enforcement, rollout := slices.Index(names, "Enforcement"), slices.Index(names, "Rollout")
	if enforcement < 0 || rollout < 0 || !slices.Contains(names, "Drifted") || len(table.Rows) != 1 {
		t.Fatalf("columns %v, %d row(s); want Enforcement, Rollout and Drifted, one row", names, len(table.Rows))
	}
	if cells := table.Rows[0].Cells; cells[enforcement] != "Audit" || cells[rollout] != string(schedv1alpha1.RolloutProgressing) {
		t.Errorf("row %v: want Enforcement Audit and Rollout %s", cells, schedv1alpha1.RolloutProgressing)
	}
}
