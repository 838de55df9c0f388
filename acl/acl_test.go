package acl

import (
	"bytes"
	"encoding/json"
	"flag"
	"github.com/conclave-io/conclave/providers/election/standing"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// update rewrites the golden files: go test ./acl -run TestCompileGolden -update.
var update = flag.Bool("update", false, "rewrite acl/testdata/*.golden.json from Compile")

const bucket = "CHORIA_LEADER_ELECTION"

// examples are the users docs/security.md and the README use.
var examples = []struct {
	user  string
	grant Grant
}{
	{"app-a", Grant{Campaign: []string{"app-a.>"}}},
	{"billing", Grant{Campaign: []string{"billing"}}},
	{"ops", Grant{Admin: true}},
	{"dash", Grant{Observe: []string{">"}}},
	{"cron", Grant{Campaign: []string{"cron.*.nightly", "cron.backup"}, Observe: []string{"app-a.>"}}},
	{"nobody", Grant{}},
}

// TestCompileGolden compares each example's allow lists with its golden
// file, so that any change to what a user may do shows up in review.
func TestCompileGolden(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.user, func(t *testing.T) {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false) // keep > readable
			enc.SetIndent("", "  ")
			if err := enc.Encode(Compile(bucket, ex.user, ex.grant)); err != nil {
				t.Fatal(err)
			}
			got := buf.Bytes()
			path := filepath.Join("testdata", ex.user+".golden.json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./acl -run TestCompileGolden -update to make it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("Compile(%s) =\n%s\nwant (%s)\n%s", ex.user, got, path, want)
			}
		})
	}
}

// TestShardGroupSubjects: a user who may campaign in every shard of a
// group, G.>, may talk on the group's subject and its subgroups'; one who
// may campaign in a few shards, or one election, may not.
func TestShardGroupSubjects(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		want    []string
	}{
		{">", []string{"conclave.shards.B.>"}},
		{"ingest.>", []string{"conclave.shards.B.ingest", "conclave.shards.B.ingest.>"}},
		{"app-a.ingest.>", []string{"conclave.shards.B.app-a.ingest", "conclave.shards.B.app-a.ingest.>"}},
		{"ingest.*", nil},
		{"ingest.3", nil},
		{"cron", nil},
	} {
		if got := shardGroupSubjects("B", tc.pattern); !slices.Equal(got, tc.want) {
			t.Errorf("shardGroupSubjects(%q) = %v, want %v", tc.pattern, got, tc.want)
		}
	}
}

// TestCompileMakesAllowListsOnly: every list is sorted and duplicate-free,
// every subscription is under the user's own inbox (or the stream's
// announcements, or the candidates' and hand-over subjects of its
// elections), only users who read every election may make consumers
// with several filters, and no subject lets
// anyone purge, delete or change the bucket's stream.
func TestCompileMakesAllowListsOnly(t *testing.T) {
	for _, ex := range examples {
		p := Compile(bucket, ex.user, ex.grant)
		if p.Publish == nil || p.Subscribe == nil {
			t.Errorf("%s: a nil list would allow everything", ex.user)
		}
		if !slices.IsSorted(p.Publish) || len(slices.Compact(slices.Clone(p.Publish))) != len(p.Publish) {
			t.Errorf("%s: publish list not sorted and unique: %v", ex.user, p.Publish)
		}
		campaign := slices.Clone(ex.grant.Campaign)
		if ex.grant.Admin {
			campaign = append(campaign, ">")
		}
		// Its inbox, the announcements of the bucket's stream, for each
		// election it observes the candidates' announcements, and for each
		// it campaigns in the candidates', announcement and hand-over
		// subjects.
		allowedSub := []string{InboxPrefix(ex.user) + ".>", "$JS.EVENT.ADVISORY.STREAM.*.KV_" + bucket}
		for _, o := range ex.grant.Observe {
			allowedSub = append(allowedSub, standing.AnnounceSubject(bucket, o))
		}
		for _, c := range campaign {
			standing := []string{standing.CandidatesSubject(bucket, c), standing.AnnounceSubject(bucket, c), standing.HandOverSubject(bucket, c)}
			allowedSub = append(allowedSub, standing...)
			// The shard groups whose every shard it may campaign in.
			allowedSub = append(allowedSub, shardGroupSubjects(bucket, c)...)
			for _, want := range standing {
				if !slices.Contains(p.Publish, want) || !slices.Contains(p.Subscribe, want) {
					t.Errorf("%s campaigns in %s but may not publish and subscribe %s", ex.user, c, want)
				}
			}
		}
		for _, s := range p.Subscribe {
			if !slices.Contains(allowedSub, s) {
				t.Errorf("%s may subscribe to %s, outside its inbox and its elections", ex.user, s)
			}
		}
		// Observers ask who stands and hear the announcements, and take
		// no hand-over requests.
		for _, o := range ex.grant.Observe {
			if !slices.Contains(p.Publish, standing.CandidatesSubject(bucket, o)) || !slices.Contains(p.Subscribe, standing.AnnounceSubject(bucket, o)) {
				t.Errorf("%s observes %s but may not ask who stands there, or hear the announcements", ex.user, o)
			}
			if !slices.Contains(campaign, o) && slices.Contains(p.Publish, standing.HandOverSubject(bucket, o)) {
				t.Errorf("%s only observes %s but may ask for a hand-over there", ex.user, o)
			}
		}
		// Only candidates answer requests.
		if p.AllowResponses != (len(campaign) > 0) {
			t.Errorf("%s: allow_responses %v, want %v", ex.user, p.AllowResponses, len(campaign) > 0)
		}
		// A consumer with several filters reads any key: only for those
		// who may read every election.
		everything := ex.grant.Admin || slices.Contains(ex.grant.Campaign, ">") || slices.Contains(ex.grant.Observe, ">")
		if got := slices.Contains(p.Publish, "$JS.API.CONSUMER.CREATE.KV_"+bucket+".*"); got != everything {
			t.Errorf("%s may make consumers with several filters: %v, want %v", ex.user, got, everything)
		}
		for _, s := range p.Publish {
			switch {
			case strings.Contains(s, ".STREAM.") && !strings.HasPrefix(s, "$JS.API.STREAM.INFO."),
				s == ">" || strings.HasPrefix(s, "$JS.API.>") || strings.HasPrefix(s, "$JS.API.*"),
				s == "$JS.API.CONSUMER.CREATE.KV_"+bucket, // the old form: any filter
				strings.HasPrefix(s, "_INBOX"):
				t.Errorf("%s may publish to %s", ex.user, s)
			}
		}
	}
	if p := Compile(bucket, "nobody", Grant{}); len(p.Publish) != 0 || len(p.Subscribe) != 0 {
		t.Errorf("an empty grant allows %v", p)
	}
}
