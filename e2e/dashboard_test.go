package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"gotest.tools/v3/assert"
)

// dashboardFile is the Grafana dashboard the package ships.
const dashboardFile = "../deploy/grafana/dedup.json"

// leftOutOfDashboard are the relay's metric prefixes no panel shows, on
// purpose: the Go runtime's and the process's, which a host or runtime
// dashboard already covers, and the exposition handler's own errors.
var leftOutOfDashboard = []string{"go_", "process_", "promhttp_"}

// prometheusOwn are series Prometheus itself makes, not an exporter.
var prometheusOwn = map[string]bool{"ALERTS": true}

type grafanaDS struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type grafanaPanel struct {
	Type        string          `json:"type"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Datasource  *grafanaDS      `json:"datasource"`
	Panels      []grafanaPanel  `json:"panels"` // a collapsed row's
	FieldConfig json.RawMessage `json:"fieldConfig"`
	Targets     []struct {
		Datasource *grafanaDS `json:"datasource"`
		Expr       string     `json:"expr"`
		Exemplar   bool       `json:"exemplar"`
		RefID      string     `json:"refId"`
	} `json:"targets"`
}

type grafanaDashboard struct {
	Title      string         `json:"title"`
	UID        string         `json:"uid"`
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string     `json:"name"`
			Type       string     `json:"type"`
			Query      any        `json:"query"`
			Datasource *grafanaDS `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

// grafanaVars are Grafana's variables as a query's text holds them, and
// what stands in for each so that PromQL's own parser can read it.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "1h",
	"${datasource}", "ds", "$job", ".*", "$instance", ".*")

// metricUse is one metric selector in a panel's query.
type metricUse struct {
	panel, name string
	underRate   bool // the selector is a range under rate/increase/irate
}

// TestDashboardQueriesTheMetricsOfThisVersion parses the shipped dashboard
// and checks it against the metrics a real relay (TLS listener, mutual TLS
// to the core) and the jobs' textfiles export: every panel has a title, a
// description, a unit and the datasource variable; every query parses as
// PromQL; every metric it names is exported (at 0 when nothing happened:
// the relay here has served nothing); counters only under rate or
// increase; and every metric the relay exports is on some panel or listed
// in leftOutOfDashboard.
func TestDashboardQueriesTheMetricsOfThisVersion(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	assert.NilError(t, err)
	var d grafanaDashboard
	assert.NilError(t, json.Unmarshal(b, &d))
	assert.Assert(t, d.Title != "" && d.UID != "")

	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type == "query" {
			assert.Assert(t, v.Datasource != nil && v.Datasource.UID == "${datasource}", "variable %s must query the datasource variable", v.Name)
		}
	}
	assert.DeepEqual(t, vars, map[string]string{"datasource": "datasource", "job": "query", "instance": "query"})

	var uses []metricUse
	exemplars := map[string]bool{}
	p := parser.NewParser(parser.Options{})
	var walk func(panels []grafanaPanel)
	walk = func(panels []grafanaPanel) {
		for _, pn := range panels {
			if pn.Type == "row" {
				assert.Assert(t, pn.Title != "", "a row without a title")
				walk(pn.Panels)
				continue
			}
			assert.Assert(t, pn.Title != "", "a panel without a title: %+v", pn)
			assert.Assert(t, pn.Description != "", "panel %q has no description", pn.Title)
			var fc struct {
				Defaults struct {
					Unit string `json:"unit"`
				} `json:"defaults"`
			}
			assert.NilError(t, json.Unmarshal(pn.FieldConfig, &fc), "panel %q", pn.Title)
			assert.Assert(t, fc.Defaults.Unit != "", "panel %q has no unit", pn.Title)
			assert.Assert(t, pn.Datasource != nil && pn.Datasource.UID == "${datasource}", "panel %q: the datasource must be the variable", pn.Title)
			assert.Assert(t, len(pn.Targets) > 0, "panel %q has no query", pn.Title)
			for _, tg := range pn.Targets {
				assert.Assert(t, tg.Datasource == nil || tg.Datasource.UID == "${datasource}", "panel %q target %s: the datasource must be the variable", pn.Title, tg.RefID)
				expr, err := p.ParseExpr(grafanaVars.Replace(tg.Expr))
				assert.NilError(t, err, "panel %q target %s: %s", pn.Title, tg.RefID, tg.Expr)
				parser.Inspect(expr, func(n parser.Node, path []parser.Node) error {
					vs, ok := n.(*parser.VectorSelector)
					if !ok {
						return nil
					}
					u := metricUse{panel: pn.Title, name: vs.Name}
					if len(path) >= 2 {
						_, inRange := path[len(path)-1].(*parser.MatrixSelector)
						call, isCall := path[len(path)-2].(*parser.Call)
						u.underRate = inRange && isCall && slices.Contains([]string{"rate", "increase", "irate"}, call.Func.Name)
					}
					uses = append(uses, u)
					if tg.Exemplar {
						exemplars[vs.Name] = true
					}
					return nil
				})
			}
		}
	}
	walk(d.Panels)
	assert.Assert(t, len(uses) > 20, "the dashboard names only %d metrics", len(uses))
	for _, h := range []string{"dedup_transaction_duration_seconds_bucket", "dedup_core_request_duration_seconds_bucket"} {
		assert.Assert(t, exemplars[h], "the latency panel of %s does not show exemplars", h)
	}

	families := exportedFamilies(t)
	used := map[string]bool{}
	for _, u := range uses {
		if prometheusOwn[u.name] {
			continue
		}
		family, typ, ok := familyOf(families, u.name)
		assert.Assert(t, ok, "panel %q uses %s, which no relay or job of this version exports", u.panel, u.name)
		used[family] = true
		if typ == dto.MetricType_COUNTER || typ == dto.MetricType_HISTOGRAM {
			assert.Assert(t, u.underRate, "panel %q uses the counter %s outside rate() or increase()", u.panel, u.name)
		}
	}
	for name := range families {
		if used[name] || slices.ContainsFunc(leftOutOfDashboard, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		t.Errorf("the relay exports %s, which no panel shows and leftOutOfDashboard does not list", name)
	}
}

// familyOf finds the family a series name belongs to (a histogram's
// _bucket, _sum and _count are its family's).
func familyOf(families map[string]*dto.MetricFamily, name string) (string, dto.MetricType, bool) {
	if f, ok := families[name]; ok {
		return name, f.GetType(), true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f, ok := families[base]; ok && f.GetType() == dto.MetricType_HISTOGRAM {
				return base, f.GetType(), true
			}
		}
	}
	return "", 0, false
}

// exportedFamilies starts a relay that has served nothing (TLS listener,
// mutual TLS to the core) and runs the jobs with --metrics-textfile, and
// returns every metric family they export.
func exportedFamilies(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	pki := newTestPKI(t)
	c := startTLSCore(t, pki, true)
	db := tempDB(t)
	r := startRelay(t, db, c.url, append(append(pki.listenerArgs(), pki.coreArgs()...), "--metrics-listen", "127.0.0.1:0")...)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Get("http://" + r.metricsAddr + "/metrics")
	assert.NilError(t, err)
	defer resp.Body.Close()
	tp := expfmt.NewTextParser(model.UTF8Validation)
	families, err := tp.TextToMetricFamilies(resp.Body)
	assert.NilError(t, err)
	relayOnly := map[string]*dto.MetricFamily{}
	for k, v := range families {
		relayOnly[k] = v
	}

	dir := t.TempDir()
	for _, job := range [][]string{
		append([]string{"resolve", "--db", db, "--core", c.url, "--min-age", "0"}, pki.coreArgs()...),
		append([]string{"reprocess", "--db", db, "--core", c.url}, pki.coreArgs()...),
		{"purge", "--db", db, "--days", "3"},
		append([]string{"reconcile", "--db", db, "--core", c.url, "--date", today()}, pki.coreArgs()...),
	} {
		file := filepath.Join(dir, job[0]+".prom")
		res := runJob(t, job[0], append(job[1:], "--metrics-textfile", file)...)
		assert.Equal(t, res.ExitCode, 0)
		f, err := os.Open(file)
		assert.NilError(t, err)
		jp := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := jp.TextToMetricFamilies(f)
		f.Close()
		assert.NilError(t, err)
		for k, v := range fams {
			families[k] = v
		}
	}
	for _, want := range []string{"dedup_tls_cert_expiry_timestamp_seconds", "dedup_ledger_not_committed_total", "dedup_replies_total"} {
		assert.Assert(t, relayOnly[want] != nil, "the relay does not export %s", want)
	}
	// Only the relay's families must all be on the dashboard; the jobs'
	// are all used by the jobs row, which the loop above checks too.
	return families
}
