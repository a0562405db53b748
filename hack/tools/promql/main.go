// Command promql parses PromQL expressions with Prometheus's own parser
// (github.com/prometheus/prometheus/promql/parser, what promtool and the
// rule manager use) and says, for each, its type and the metric names it
// selects. It lives in a module of its own so that Prometheus's
// dependencies never change the versions celsched is built with; the chart
// test (test/integration, TestHelmChartMonitoring) runs it on the
// PrometheusRule's expressions and the dashboard's queries.
//
// Input (stdin): a JSON object of expressions by key. Output (stdout): a
// JSON object by the same keys of {"type", "metrics"} or {"error"}. The exit
// status is 0 whatever the expressions; 1 when the input is not JSON.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// result is what the parser made of one expression.
type result struct {
	Type    string   `json:"type,omitempty"`
	Metrics []string `json:"metrics,omitempty"`
	Error   string   `json:"error,omitempty"`
}

func main() {
	var exprs map[string]string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		fmt.Fprintf(os.Stderr, "promql: reading the expressions (a JSON object of strings): %v\n", err)
		os.Exit(1)
	}
	out := make(map[string]result, len(exprs))
	for key, text := range exprs {
		out[key] = parse(text)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "promql: %v\n", err)
		os.Exit(1)
	}
}

// parse parses one expression and collects the metric names of its
// selectors (a selector without a fixed name, {__name__=~"..."}, is an
// error: its names cannot be checked).
func parse(text string) result {
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(text)
	if err != nil {
		return result{Error: err.Error()}
	}
	var names []string
	var bad error
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			bad = fmt.Errorf("selector %s names no metric", vs)
			return nil
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
		return nil
	})
	if bad != nil {
		return result{Error: bad.Error()}
	}
	slices.Sort(names)
	return result{Type: string(expr.Type()), Metrics: names}
}
