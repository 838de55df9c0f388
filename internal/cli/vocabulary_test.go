package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestJSONVocabulary pins the field names of every --json output: each
// command's top-level fields, and that a name means the same type wherever
// it appears and is in docs/cli.md's table of JSON fields. An election's name
// is "election" (a string) everywhere, the bucket is the object "bucket"
// everywhere, and the time of the latest write is "written" everywhere.
func TestJSONVocabulary(t *testing.T) {
	t.Parallel()
	url := startBroker(t, 2*time.Second)
	js := jetStream(t, url)
	campaign(t, js, "n1", "vocab").waitLeading(t)
	c2 := campaign(t, js, "n2", "vocab")

	outputs := map[string][]string{} // command → its JSON objects
	one := func(name string, r result, stream string) {
		t.Helper()
		text := r.stdout
		if stream == "stderr" {
			text = r.stderr
		}
		outputs[name] = append(outputs[name], text)
	}
	r := conclave(t, "--server", url, "election", "list", "--json")
	mustSucceed(t, r)
	one("list", r, "stdout")
	r = conclave(t, "--server", url, "election", "info", "vocab", "--json")
	mustSucceed(t, r)
	one("info", r, "stdout")
	r = conclave(t, "--server", url, "election", "info", "--json")
	mustSucceed(t, r)
	one("info", r, "stdout")

	w := startConclave(t, nil, "--server", url, "election", "watch", "vocab", "--json")
	w.stdout.waitFor(t, 0, regexp.MustCompile(`"event":"current"`))

	r = conclave(t, "--server", url, "election", "stand-down", "vocab", "--force", "--wait", "20s", "--json")
	mustSucceed(t, r)
	one("stand-down", r, "stdout")
	w.stdout.waitFor(t, 0, regexp.MustCompile(`"event":"elected"`))
	c2.waitLeading(t) // the term begins a TTL after the forced stand-down
	r = conclave(t, "--server", url, "election", "stand-down", "--to", "n1", "--force", "--wait", "20s", "--json", "vocab")
	mustSucceed(t, r)
	one("stand-down --to", r, "stdout")
	w.signal(syscall.SIGINT)
	if code := w.wait(); code != 0 {
		t.Errorf("watch exited %d after SIGINT, want 0", code)
	}
	outputs["watch"] = []string{w.stdout.String()}

	r = conclave(t, "--server", url, "election", "run", "--json", "--identity", "r1", "--grace", "100ms", "solo", "sh", "-c", "exit 3")
	one("run", r, "stderr")
	r = conclave(t, "--server", url, "election", "info", "nosuch", "--json")
	one("error", r, "stderr")

	// Each command's top-level fields, as documented.
	top := map[string][]string{
		"list":            {"bucket", "elections"},
		"info":            {"bucket", "candidates", "elections", "warnings"},
		"stand-down":      {"bucket", "election", "marker_revision", "new_leader", "new_leader_instance", "removed_leader", "removed_leader_instance", "removed_revision", "token"},
		"stand-down --to": {"bucket", "election", "from", "from_instance", "handed_over", "marker_revision", "new_leader", "new_leader_instance", "to", "to_identity", "to_instance", "token"},
		"watch":           {"election", "event", "expires_at", "handed_over_by", "handed_over_by_instance", "instance", "leader", "previous_leader", "previous_leader_instance", "released_by", "released_by_instance", "revision", "state", "time", "token", "written"},
		"run":             {"bucket", "election", "event", "exit_status", "identity", "instance", "message", "status", "time", "token"},
		"error":           {"error", "event", "exit_status", "time"},
	}
	documented := jsonFieldsTable(t)
	kinds := map[string]map[string]bool{} // field → the JSON types it has
	for cmd, texts := range outputs {
		seen := map[string]bool{}
		for _, text := range texts {
			dec := json.NewDecoder(strings.NewReader(text))
			for dec.More() {
				var v map[string]any
				if err := dec.Decode(&v); err != nil {
					t.Fatalf("%s: output is not JSON objects: %v\n%s", cmd, err, text)
				}
				for k := range v {
					seen[k] = true
				}
				collectKinds(v, kinds)
			}
		}
		var got []string
		for k := range seen {
			got = append(got, k)
		}
		slices.Sort(got)
		if !slices.Equal(got, top[cmd]) {
			t.Errorf("%s --json has the fields %v, want %v", cmd, got, top[cmd])
		}
	}
	for field, ks := range kinds {
		delete(ks, "null")
		if len(ks) > 1 {
			t.Errorf("field %q has more than one type across the commands: %v", field, ks)
		}
		if !documented[field] {
			t.Errorf("field %q is not in docs/cli.md's table of JSON fields", field)
		}
	}
	for _, field := range []string{"election", "bucket", "written"} {
		if kinds[field] == nil {
			t.Errorf("no command printed %q", field)
		}
	}
	if !kinds["election"]["string"] || !kinds["bucket"]["object"] {
		t.Errorf("election is %v and bucket %v, want a string and an object", kinds["election"], kinds["bucket"])
	}
}

// collectKinds records the JSON type of every field of v, at any depth.
func collectKinds(v any, kinds map[string]map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, f := range v {
			if kinds[k] == nil {
				kinds[k] = map[string]bool{}
			}
			kinds[k][jsonKind(f)] = true
			collectKinds(f, kinds)
		}
	case []any:
		for _, e := range v {
			collectKinds(e, kinds)
		}
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	case []any:
		return "array"
	default:
		return "object"
	}
}

// jsonFieldsTable returns the field names in docs/cli.md's "JSON fields"
// table.
func jsonFieldsTable(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## JSON fields\n")
	if !ok {
		t.Fatal(`docs/cli.md has no "## JSON fields" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	fields := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.Split(line, "|")[1]
		for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(first, -1) {
			fields[m[1]] = true
		}
	}
	return fields
}
