// Package prometheus_test checks conclave-alerts.yml against the metrics the
// code exports, so that the alerting rules cannot drift from it: every metric
// an expression reads is one that the metrics package or a running broker
// serves, every label it matches or groups by exists, and every value it
// matches for a state or cause label is one the election reports.
//
// The module has no YAML parser, so the file's shape (groups of rules, each
// with an expression, a severity, a summary and a description) is checked
// line by line over the subset of YAML the file uses.
package prometheus_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/metrics"
	"github.com/conclave-io/conclave/providers/election/streams"
)

const rulesFile = "conclave-alerts.yml"

// prometheusOwn are series Prometheus makes itself when it scrapes.
var prometheusOwn = []string{"up"}

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"job", "instance"}

// rule is one alerting rule as read from the file.
type rule struct {
	line        int
	alert       string
	expr        string
	forDuration string
	labels      map[string]string
	annotations map[string]string
}

// exported is what the code exports: metric names with their label names.
type exported map[string]map[string]bool

func TestRulesReadOnlyExportedMetrics(t *testing.T) {
	rules := readRules(t)
	known := electionMetrics(t)
	for name, labels := range brokerMetrics(t) {
		known[name] = labels
	}
	for _, name := range prometheusOwn {
		known[name] = map[string]bool{}
	}
	allLabels := map[string]bool{}
	for _, labels := range known {
		for l := range labels {
			allLabels[l] = true
		}
	}
	for _, l := range targetLabels {
		allLabels[l] = true
	}
	values := map[string][]string{"cause": causes(), "state": states()}

	used := map[string]bool{}
	for _, r := range rules {
		names := metricNames(r.expr)
		if len(names) == 0 {
			t.Errorf("%s:%d %s: the expression reads no metric: %s", rulesFile, r.line, r.alert, r.expr)
		}
		for _, name := range names {
			used[name] = true
			if _, ok := known[name]; !ok {
				t.Errorf("%s:%d %s: %s is not a metric the code exports (it exports %s)", rulesFile, r.line, r.alert, name, strings.Join(sortedKeys(known), ", "))
			}
		}
		for _, m := range matchers(r.expr) {
			labels, ok := known[m.metric]
			if !ok {
				continue // reported above
			}
			if !labels[m.label] && !slices.Contains(targetLabels, m.label) {
				t.Errorf("%s:%d %s: %s has no label %q (it has %s)", rulesFile, r.line, r.alert, m.metric, m.label, strings.Join(sortedKeys(labels), ", "))
			}
			if want, ok := values[m.label]; ok && strings.HasPrefix(m.metric, "conclave_election_") {
				for _, v := range matcherValues(m) {
					if !slices.Contains(want, v) {
						t.Errorf("%s:%d %s: %s{%s} is never %q (it is one of %s)", rulesFile, r.line, r.alert, m.metric, m.label, v, strings.Join(want, ", "))
					}
				}
			}
		}
		for _, l := range groupingLabels(r.expr) {
			if !allLabels[l] {
				t.Errorf("%s:%d %s: no exported metric has the label %q it groups or matches by", rulesFile, r.line, r.alert, l)
			}
		}
		for _, text := range r.annotations {
			for _, m := range templateLabel.FindAllStringSubmatch(text, -1) {
				if !allLabels[m[1]] {
					t.Errorf("%s:%d %s: an annotation uses $labels.%s, a label no exported metric has", rulesFile, r.line, r.alert, m[1])
				}
			}
		}
	}

	// The rules this file exists for.
	for _, name := range []string{"conclave_election_leader", "conclave_election_campaigns_total", "conclave_election_losses_total", "conclave_broker_up"} {
		if !used[name] {
			t.Errorf("no rule reads %s", name)
		}
	}
	if !slices.ContainsFunc(rules, func(r rule) bool { return r.alert == "ConclaveElectionLeaderless" }) {
		t.Error("no rule ConclaveElectionLeaderless")
	}
}

func TestRulesShape(t *testing.T) {
	rules := readRules(t)
	if len(rules) == 0 {
		t.Fatal("no rules")
	}
	seen := map[string]bool{}
	for _, r := range rules {
		where := func() string { return rulesFile + ":" + strconv.Itoa(r.line) + " " + r.alert }
		if !regexp.MustCompile(`^Conclave[A-Z][A-Za-z]+$`).MatchString(r.alert) {
			t.Errorf("%s: alert names are Conclave followed by CamelCase", where())
		}
		if seen[r.alert] {
			t.Errorf("%s: a second rule of that name", where())
		}
		seen[r.alert] = true
		if strings.TrimSpace(r.expr) == "" {
			t.Errorf("%s: no expr", where())
		}
		if err := balanced(r.expr); err != nil {
			t.Errorf("%s: expr: %v", where(), err)
		}
		if r.forDuration != "" && !regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`).MatchString(r.forDuration) {
			t.Errorf("%s: for: %q is not a Prometheus duration", where(), r.forDuration)
		}
		if s := r.labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q, want critical or warning", where(), s)
		}
		for _, key := range []string{"summary", "description"} {
			if strings.TrimSpace(r.annotations[key]) == "" {
				t.Errorf("%s: no %s annotation", where(), key)
			}
		}
		for key, text := range r.annotations {
			if strings.Count(text, "{{") != strings.Count(text, "}}") {
				t.Errorf("%s: annotation %s: unbalanced {{ }}", where(), key)
			}
		}
	}
}

// electionMetrics registers the metrics package's collectors, records one
// of everything, and returns the metric names gathered, with the suffixes
// Prometheus gives a histogram's series.
func electionMetrics(t *testing.T) exported {
	t.Helper()
	reg := prometheus.NewRegistry()
	rec, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	const key = "rules_test"
	rec.Campaign(key, streams.CandidateState)
	rec.Won(key)
	rec.Leading(key, true)
	rec.Campaign(key, streams.LeaderState)
	rec.Renewed(key, time.Millisecond)
	rec.Lost(key, streams.CauseDeadline)
	rec.Standing(key, "n1", 2, 1)

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := exported{}
	for _, f := range families {
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		name := f.GetName()
		out[name] = labels
		if f.GetType().String() == "HISTOGRAM" {
			out[name+"_count"] = labels
			out[name+"_sum"] = labels
			withLE := map[string]bool{"le": true}
			for l := range labels {
				withLE[l] = true
			}
			out[name+"_bucket"] = withLE
		}
	}
	for _, want := range []string{"conclave_election_leader", "conclave_election_last_renewal_age_seconds", "conclave_election_candidates"} {
		if _, ok := out[want]; !ok {
			t.Fatalf("the metrics package gathered no %s: record more in this test (got %s)", want, strings.Join(sortedKeys(out), ", "))
		}
	}
	return out
}

// brokerMetrics starts a broker with monitoring on and returns the metric
// names, with their label names, that its /metrics serves.
func brokerMetrics(t *testing.T) exported {
	t.Helper()
	cfg := config.Default()
	cfg.Identity = "rules-test"
	cfg.LogLevel = "warn"
	cfg.BrokerNetwork = true
	cfg.ClientPort = -1
	cfg.StatsPort = -1
	cfg.StreamStore = t.TempDir()
	cfg.LeaderElectionReplicas = 1
	log := logrus.New()
	log.SetOutput(io.Discard)
	b, err := broker.New(cfg, logrus.NewEntry(log))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.StatsURL()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	out := exported{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	sample := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? `)
	labelName := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
	for sc.Scan() {
		m := sample.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		labels := out[m[1]]
		if labels == nil {
			labels = map[string]bool{}
			out[m[1]] = labels
		}
		for _, l := range labelName.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if _, ok := out[broker.MetricUp]; !ok {
		t.Fatalf("the broker's /metrics lacks %s", broker.MetricUp)
	}
	return out
}

// causes returns every cause the election reports a lost term with.
func causes() []string {
	var out []string
	for c := streams.Cause(1); c.String() != "unknown"; c++ {
		out = append(out, c.String())
	}
	return out
}

// states returns every state a campaign is counted under.
func states() []string {
	var out []string
	for s := streams.State(1); s.String() != "unknown"; s++ {
		out = append(out, s.String())
	}
	return out
}

// readRules reads the rules file's subset of YAML: groups with a name and
// rules, each rule with alert, expr (inline or a block scalar), for, labels
// and annotations (each inline or a folded or literal block).
func readRules(t *testing.T) []rule {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var rules []rule
	var cur *rule
	var section string // "labels" or "annotations" inside a rule
	sawGroups := false
	indent := func(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		n := i + 1
		if strings.Contains(line, "\t") {
			t.Errorf("%s:%d: a tab; YAML indents with spaces", rulesFile, n)
		}
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		ind := indent(line)
		key, value, ok := strings.Cut(strings.TrimPrefix(trimmed, "- "), ":")
		if !ok {
			t.Errorf("%s:%d: not a key: value line: %q", rulesFile, n, line)
			continue
		}
		value = strings.TrimSpace(value)
		// A block scalar: the more indented lines that follow.
		if value == "|" || value == ">" || value == ">-" || value == "|-" {
			var block []string
			for i+1 < len(lines) && (strings.TrimSpace(lines[i+1]) == "" || indent(lines[i+1]) > ind) {
				i++
				block = append(block, strings.TrimSpace(lines[i]))
			}
			value = strings.TrimSpace(strings.Join(block, " "))
		}
		value = unquote(value)
		switch {
		case ind == 0:
			if key != "groups" {
				t.Errorf("%s:%d: top-level key %q, want only groups", rulesFile, n, key)
			}
			sawGroups = true
		case key == "name" && strings.HasPrefix(trimmed, "- "):
			if value == "" {
				t.Errorf("%s:%d: a group without a name", rulesFile, n)
			}
		case key == "rules":
		case key == "alert" && strings.HasPrefix(trimmed, "- "):
			rules = append(rules, rule{line: n, alert: value, labels: map[string]string{}, annotations: map[string]string{}})
			cur = &rules[len(rules)-1]
			section = ""
		case cur == nil:
			t.Errorf("%s:%d: %q outside a rule", rulesFile, n, key)
		case key == "expr":
			cur.expr, section = value, ""
		case key == "for":
			cur.forDuration, section = value, ""
		case key == "labels" || key == "annotations":
			if value != "" {
				t.Errorf("%s:%d: %s: write one key per line", rulesFile, n, key)
			}
			section = key
		case section == "labels":
			cur.labels[key] = value
		case section == "annotations":
			cur.annotations[key] = value
		default:
			t.Errorf("%s:%d: unexpected key %q in rule %s", rulesFile, n, key, cur.alert)
		}
	}
	if !sawGroups {
		t.Errorf("%s: no groups", rulesFile)
	}
	return rules
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' && s[len(s)-1] == '"' || s[0] == '\'' && s[len(s)-1] == '\'') {
		return s[1 : len(s)-1]
	}
	return s
}

var (
	ident         = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	selector      = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}`)
	matcher       = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	grouping      = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	templateLabel = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)
	keywords      = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan"}
)

// metricNames returns the metric names an expression reads: identifiers
// that are not functions, aggregations, keywords, labels or durations.
func metricNames(expr string) []string {
	s := regexp.MustCompile(`"[^"]*"|'[^']*'`).ReplaceAllString(expr, `""`)
	s = regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(s, " ")
	s = regexp.MustCompile(`\[[^\]]*\]`).ReplaceAllString(s, " ")
	s = regexp.MustCompile(`\boffset\s+-?[0-9a-z]+`).ReplaceAllString(s, " ")
	s = grouping.ReplaceAllString(s, " ")
	var names []string
	for _, loc := range ident.FindAllStringIndex(s, -1) {
		word := s[loc[0]:loc[1]]
		if loc[0] > 0 && isWordByte(s[loc[0]-1]) {
			continue // the tail of a number or duration, as in 15m
		}
		if slices.Contains(keywords, strings.ToLower(word)) {
			continue
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \n"); strings.HasPrefix(rest, "(") {
			continue // a function or an aggregation
		}
		if !slices.Contains(names, word) {
			names = append(names, word)
		}
	}
	return names
}

func isWordByte(b byte) bool {
	return b == '_' || b == '.' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// labelMatcher is one matcher of a selector, such as state="leader".
type labelMatcher struct {
	metric, label, op, value string
}

func matchers(expr string) []labelMatcher {
	var out []labelMatcher
	for _, sel := range selector.FindAllStringSubmatch(expr, -1) {
		for _, m := range matcher.FindAllStringSubmatch(sel[2], -1) {
			out = append(out, labelMatcher{metric: sel[1], label: m[1], op: m[2], value: m[3]})
		}
	}
	return out
}

// matcherValues returns the values a matcher names: the value of = or !=,
// the alternatives of a regular expression made only of alternatives.
func matcherValues(m labelMatcher) []string {
	if m.op == "=" || m.op == "!=" {
		return []string{m.value}
	}
	if regexp.MustCompile(`^[a-z_|]+$`).MatchString(m.value) {
		return strings.Split(m.value, "|")
	}
	return nil
}

// groupingLabels returns the labels named in by, without, on, ignoring,
// group_left and group_right clauses.
func groupingLabels(expr string) []string {
	var out []string
	for _, g := range grouping.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
	}
	return out
}

// balanced reports unbalanced brackets outside strings.
func balanced(expr string) error {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	inString := rune(0)
	for _, r := range expr {
		switch {
		case inString != 0:
			if r == inString {
				inString = 0
			}
		case r == '"' || r == '\'':
			inString = r
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return fmt.Errorf("unbalanced %q", r)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 || inString != 0 {
		return fmt.Errorf("unclosed %q", stack)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
