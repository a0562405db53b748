package app

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/celsched/celsched/simulate/impact"
)

// printImpactMarkdown prints an impact report as GitHub-flavoured
// Markdown, for a pull-request comment or $GITHUB_STEP_SUMMARY: what the
// table output says, with at most maxPods changed pods listed and the
// rest counted.
func printImpactMarkdown(w io.Writer, r *impact.Report, maxPods int) error {
	var b strings.Builder
	changed := len(r.Pods)
	verdict := "no pod changes"
	if changed > 0 {
		verdict = fmt.Sprintf("%d pod(s) change", changed)
	}
	if len(r.Groups) > 0 {
		verdict += fmt.Sprintf(", %d pod group(s) change", len(r.Groups))
	}
	fmt.Fprintf(&b, "### celsched impact: %s\n\n", verdict)
	fmt.Fprintf(&b, "**Draft:** %s  \n", mdText(draftLine(r)))
	if line := paramsLine(r); line != "" {
		fmt.Fprintf(&b, "**Params:** %s  \n", mdText(line))
	}
	fmt.Fprintf(&b, "**Pods:** %s", mdText(podsLine(&r.Summary)))
	if line := r.Summary.GroupsLine(); line != "" {
		fmt.Fprintf(&b, "  \n**Pod groups:** %s", mdText(line))
	}
	b.WriteString("\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\n> **Note:** %s\n", mdText(n))
	}

	b.WriteString("\n| change | pods |\n|---|---:|\n")
	for _, c := range impact.Changes {
		if n := r.Summary.ByChange[c]; n > 0 {
			fmt.Fprintf(&b, "| %s | %d |\n", c, n)
		}
	}
	if len(r.Summary.ByNamespace)+len(r.Summary.ByPolicy)+len(r.Summary.ByParams) > 0 {
		b.WriteString("\n<details><summary>By namespace, policy and params object</summary>\n")
		mdCounts(&b, "namespace", r.Summary.ByNamespace)
		mdCounts(&b, "policy", r.Summary.ByPolicy)
		mdCounts(&b, "params object", r.Summary.ByParams)
		b.WriteString("\n</details>\n")
	}

	if len(r.Groups) > 0 {
		b.WriteString("\n#### Pod groups that change\n\n| group | change | now | with the draft | policies |\n|---|---|---|---|---|\n")
		for i := range r.Groups {
			g := &r.Groups[i]
			fmt.Fprintf(&b, "| %s | **%s** | %s | %s | %s |\n", mdCode(g.Group), g.Change,
				mdText(g.Now.Outcome()), mdText(g.Draft.Outcome()), mdText(strings.Join(g.Policies, ", ")))
		}
	}
	if changed > 0 {
		b.WriteString("\n#### Pods that change\n\n| pod | node | change | now | with the draft | policies |\n|---|---|---|---|---|---|\n")
		for i := range r.Pods {
			if maxPods >= 0 && i == maxPods {
				fmt.Fprintf(&b, "\n…and %d more (`celsched impact -o json` lists every pod).\n", changed-maxPods)
				break
			}
			p := &r.Pods[i]
			fmt.Fprintf(&b, "| %s | %s | **%s** | %s | %s | %s |\n",
				mdCode(p.Pod), mdText(orDash(p.Node)), p.Change, mdText(outcome(p.Now)), mdText(outcome(p.Draft)), mdText(podPolicies(p)))
		}
		var why bytes.Buffer
		listed := *r
		if maxPods >= 0 && maxPods < changed {
			listed.Pods = r.Pods[:maxPods]
		}
		printWhy(&why, &listed)
		if why.Len() > 0 {
			fmt.Fprintf(&b, "\n<details><summary>Why, with the draft</summary>\n\n```\n%s```\n\n</details>\n",
				strings.ReplaceAll(strings.TrimPrefix(why.String(), "\nWhy, with the draft:\n"), "```", "'''"))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mdCounts prints counts per key and change as a table.
func mdCounts(b *strings.Builder, what string, counts map[string]map[impact.Change]int) {
	if len(counts) == 0 {
		return
	}
	keys := slices.Sorted(maps.Keys(counts))
	fmt.Fprintf(b, "\n| %s | change | pods |\n|---|---|---:|\n", what)
	for _, k := range keys {
		for _, c := range impact.Changes {
			if n := counts[k][c]; n > 0 {
				fmt.Fprintf(b, "| %s | %s | %d |\n", mdText(k), c, n)
			}
		}
	}
}

// mdText escapes text for a Markdown table cell: pipes, HTML and line
// breaks.
var mdText = strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;", "\n", " ", "`", "'").Replace

// mdCode is text as inline code in a table cell.
func mdCode(s string) string {
	return "`" + strings.NewReplacer("|", `\|`, "`", "'", "\n", " ").Replace(s) + "`"
}
