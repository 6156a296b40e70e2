package console

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"dedup"
)

// alertRule is one rule of deploy/prometheus/alerts.yml, as far as the
// console's thresholds need it.
type alertRule struct {
	text     string // the rule's lines
	expr     string
	forText  string
	severity string
}

// alertRules reads the alert rules file (a few lines per rule; no YAML
// library needed for what is checked here).
func alertRules(t *testing.T) map[string]alertRule {
	t.Helper()
	data, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	assert.NilError(t, err)
	rules := map[string]alertRule{}
	parts := regexp.MustCompile(`(?m)^\s*- alert: `).Split(string(data), -1)
	for _, p := range parts[1:] {
		name, body, _ := strings.Cut(p, "\n")
		r := alertRule{text: body}
		lines := strings.Split(body, "\n")
		for i, l := range lines {
			l = strings.TrimSpace(l)
			switch {
			case strings.HasPrefix(l, "expr:"):
				r.expr = strings.TrimSpace(strings.TrimPrefix(l, "expr:"))
				if r.expr == ">-" || r.expr == "|" {
					var b []string
					for _, m := range lines[i+1:] {
						if !strings.HasPrefix(m, "          ") {
							break
						}
						b = append(b, strings.TrimSpace(m))
					}
					r.expr = strings.Join(b, " ")
				}
			case strings.HasPrefix(l, "for:"):
				r.forText = strings.TrimSpace(strings.TrimPrefix(l, "for:"))
			case strings.HasPrefix(l, "severity:"):
				r.severity = strings.TrimSpace(strings.TrimPrefix(l, "severity:"))
			}
		}
		rules[strings.TrimSpace(name)] = r
	}
	return rules
}

// comparedTo is the number an expression compares with ("> N" or
// "> A * B"), in the expression's own units.
var comparedTo = regexp.MustCompile(`>\s*([0-9.]+)(?:\s*\*\s*([0-9.]+))?`)

func number(t *testing.T, expr string) float64 {
	t.Helper()
	m := comparedTo.FindStringSubmatch(expr)
	assert.Assert(t, m != nil, "no comparison in %q", expr)
	v, err := strconv.ParseFloat(m[1], 64)
	assert.NilError(t, err)
	if m[2] != "" {
		f, err := strconv.ParseFloat(m[2], 64)
		assert.NilError(t, err)
		v *= f
	}
	return v
}

// The overview judges by the alert rules' own numbers: every threshold of
// attention.go names a rule of deploy/prometheus/alerts.yml with the same
// severity, and the same number (a comparison in seconds, or a "for:").
// A rule changed on one side only fails here.
func TestConsoleAndAlertRulesAgree(t *testing.T) {
	rules := alertRules(t)
	check := func(th threshold, viaFor bool) {
		t.Helper()
		r, ok := rules[th.Alert]
		if !assert.Check(t, ok, "the console judges by %s, which alerts.yml does not have", th.Alert) {
			return
		}
		assert.Check(t, is.Equal(r.severity, th.Severity), "%s's severity", th.Alert)
		switch {
		case viaFor:
			d, err := time.ParseDuration(r.forText)
			assert.NilError(t, err, "%s's for: %q", th.Alert, r.forText)
			assert.Check(t, is.Equal(d, th.After), "%s waits %s in alerts.yml", th.Alert, r.forText)
		case strings.HasPrefix(r.expr, "absent("):
			d, err := time.ParseDuration(r.forText)
			assert.NilError(t, err, "%s's for: %q", th.Alert, r.forText)
			assert.Check(t, is.Equal(d, th.After), "%s waits %s in alerts.yml", th.Alert, r.forText)
		default:
			assert.Check(t, is.Equal(number(t, r.expr), th.After.Seconds()), "%s compares with %q in alerts.yml", th.Alert, r.expr)
		}
	}
	check(unknownTooOld, false)
	check(inFlightTooOld, false)
	check(ledgerClockSkew, false)
	check(attemptsOut, false)
	check(openCritical, false)
	check(ledgerDamaged, false)
	check(proposalWaiting, true)
	for _, th := range jobOverdue {
		check(th, false)
	}
	for _, th := range jobNeverReported {
		check(th, false)
	}
}

// Each critical class has one action, said the same way by the console and
// inspect (dedup.Finding.Action), the page alert's annotation and
// docs/reconcile.md.
func TestEachCriticalClassHasOneActionEverywhere(t *testing.T) {
	rules := alertRules(t)
	doc, err := os.ReadFile("../../docs/reconcile.md")
	assert.NilError(t, err)
	for _, c := range dedup.Findings {
		a := c.Action()
		assert.Check(t, a != "", "%s has no action", c)
		if !c.Critical() {
			continue
		}
		assert.Check(t, strings.Contains(rules[openCritical.Alert].text, string(c)+": "+a), "%s's action is not in %s's annotation", c, openCritical.Alert)
		assert.Check(t, strings.Contains(strings.Join(strings.Fields(string(doc)), " "), a), "%s's action is not in docs/reconcile.md", c)
	}
}
