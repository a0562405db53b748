// Command promql checks Prometheus rules and PromQL queries with
// Prometheus's own libraries: model/rulefmt (what `promtool check rules`
// and the rule manager load rule files with: the YAML, each expression, the
// durations, label and annotation names and templates) and promql/parser.
// It lives in a module of its own so that Prometheus's dependencies never
// change the versions celsched is built with; the chart test
// (test/integration, TestHelmChartMonitoring) runs it on the rendered
// PrometheusRule and Grafana dashboard.
//
//	promql rules < groups.yaml   # a rule file: {groups: [...]}
//	promql exprs < exprs.json    # a JSON object of expressions by key
//
// Output (stdout), JSON: for rules, {"errors": [...], "rules": {"GROUP/NAME":
// result}}; for exprs, {"KEY": result}; a result is {"type", "metrics"} (the
// expression's type and the metric names it selects) or {"error"}. The exit
// status is 0 whatever the rules and expressions say; 1 when the input
// cannot be read at all.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// result is what the parser made of one expression.
type result struct {
	Type    string   `json:"type,omitempty"`
	Metrics []string `json:"metrics,omitempty"`
	Error   string   `json:"error,omitempty"`
}

func main() {
	var out any
	var err error
	switch mode := strings.Join(os.Args[1:], " "); mode {
	case "rules":
		out, err = rules(os.Stdin)
	case "exprs":
		out, err = exprs(os.Stdin)
	default:
		err = fmt.Errorf("usage: promql rules|exprs < input (got %q)", mode)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "promql: %v\n", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "promql: %v\n", err)
		os.Exit(1)
	}
}

// ruleReport is what rulefmt made of a rule file.
type ruleReport struct {
	Errors []string          `json:"errors"`
	Rules  map[string]result `json:"rules"`
}

// rules loads a rule file as Prometheus does (unknown fields are errors),
// and parses each rule's expression for its metric names.
func rules(r io.Reader) (ruleReport, error) {
	content, err := io.ReadAll(r)
	if err != nil {
		return ruleReport{}, err
	}
	report := ruleReport{Errors: []string{}, Rules: map[string]result{}}
	groups, errs := rulefmt.Parse(content, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		report.Errors = append(report.Errors, err.Error())
	}
	if groups == nil {
		return report, nil
	}
	for _, g := range groups.Groups {
		for _, rule := range g.Rules {
			name := rule.Alert
			if name == "" {
				name = rule.Record
			}
			report.Rules[g.Name+"/"+name] = parse(rule.Expr)
		}
	}
	return report, nil
}

// exprs parses a JSON object of expressions.
func exprs(r io.Reader) (map[string]result, error) {
	var in map[string]string
	if err := json.NewDecoder(r).Decode(&in); err != nil {
		return nil, fmt.Errorf("reading the expressions (a JSON object of strings): %w", err)
	}
	out := make(map[string]result, len(in))
	for key, text := range in {
		out[key] = parse(text)
	}
	return out, nil
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
