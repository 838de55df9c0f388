package suggest

import "testing"

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"kitten", "sitting", 3},
		{"flaw", "lawn", 2}, {"identity", "identity", 0}, {"ünï", "uni", 2},
	} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := Distance(tc.b, tc.a); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (not symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestNearest(t *testing.T) {
	names := []string{"identity", "loglevel", "logfile", "plugin.choria.middleware_hosts"}
	for _, tc := range []struct{ name, want string }{
		{"loglevl", "loglevel"},  // one edit
		{"LOGLEVEL", "loglevel"}, // case is ignored
		{"logfil", "logfile"},    // nearer to logfile than to loglevel
		{"idntty", "identity"},   // two edits: always allowed
		{"xyz", ""},              // nothing near
		{"identity.x.y.z", ""},   // too many edits for a short name
		{"plugin.choria.middlware_host", "plugin.choria.middleware_hosts"}, // a long name allows more
	} {
		if got := Nearest(tc.name, names); got != tc.want {
			t.Errorf("Nearest(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := Nearest("logfile", []string{"logfilf", "logfilg"}); got != "logfilf" {
		t.Errorf("of equally near candidates got %q, want the first", got)
	}
}

func TestWithin(t *testing.T) {
	names := []string{"identity", "plugin.choria.middleware_hosts"}
	for _, tc := range []struct {
		name string
		most int
		want bool
	}{
		{"identity", 0, true},
		{"IDENTITY", 0, true},
		{"identiy", 1, true},
		{"idntty", 1, false},
		{"idntty", 2, true},
		{"plugin.choria.middlware_hosts", 2, true},
		{"plugin.choria.broker_network", 2, false},
		{"id", 2, false},      // the lengths alone differ by 6
		{"ïdentity", 1, true}, // runes, not bytes
	} {
		if got := Within(tc.name, names, tc.most); got != tc.want {
			t.Errorf("Within(%q, %d) = %v, want %v", tc.name, tc.most, got, tc.want)
		}
	}
}
