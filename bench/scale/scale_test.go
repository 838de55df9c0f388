package main

import (
	"github.com/conclave-io/conclave/internal/benchproc"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// entry is a KV entry for feeding the observer.
type entry struct {
	key   string
	value string
	rev   uint64
	at    time.Time
	op    jetstream.KeyValueOp
}

func (e entry) Bucket() string                  { return "CHORIA_LEADER_ELECTION" }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return []byte(e.value) }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return e.at }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }

func put(key, who string, at time.Time) entry {
	return entry{key: key, value: who, at: at, op: jetstream.KeyValuePut}
}

func TestObserverTakeovers(t *testing.T) {
	ttl := 10 * time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	k1, k2, k3 := keyName(namesDotted, 0), keyName(namesDotted, 1), keyName(namesDotted, 2)
	o := newObserver(ttl, keyNames(namesDotted, 4))

	// k1: p1 leads and renews; p2 takes over after the key expired.
	o.apply(put(k1, "p1", t0))
	o.apply(put(k1, "p1", t0.Add(3*time.Second)))
	o.apply(put(k1, "p2", t0.Add(3*time.Second+ttl+200*time.Millisecond)))
	// k2: p1 releases, p3 takes over at once.
	o.apply(put(k2, "p1", t0))
	o.apply(entry{key: k2, value: "released by p1", at: t0.Add(time.Second), op: jetstream.KeyValueDelete})
	o.apply(put(k2, "p3", t0.Add(time.Second+time.Millisecond)))
	if ch, ov := o.counts(); ch != 2 || ov != 0 {
		t.Fatalf("after clean takeovers: %d changes, %d overlaps (%v); want 2, 0", ch, ov, o.overlaps(5))
	}

	// k3: p2 writes while p1's last write is 2 s old: possible overlap.
	o.apply(put(k3, "p1", t0))
	o.apply(put(k3, "p2", t0.Add(2*time.Second)))
	if _, ov := o.counts(); ov != 1 {
		t.Fatalf("early takeover not reported: %d overlaps", ov)
	}
	if n, _ := o.firsts(3); n != 3 {
		t.Fatalf("firsts: %d elections led, want 3", n)
	}
	if got := o.leaders(); got["p2"] != 2 || got["p3"] != 1 || got["p1"] != 0 {
		t.Fatalf("leaders: %v", got)
	}
	live := map[string]bool{"p2": true, "p3": true}
	now := t0.Add(ttl + time.Second) // every last write is within a TTL of it
	if ll := o.leaderless(3, live, now); len(ll) != 0 {
		t.Fatalf("leaderless: %v", ll)
	}
	if ll := o.leaderless(4, live, now); len(ll) != 1 || !strings.Contains(ll[0], "never led") {
		t.Fatalf("leaderless with an election never written: %v", ll)
	}
	if ll := o.leaderless(3, map[string]bool{"p3": true}, now); len(ll) != 2 {
		t.Fatalf("leaderless with p2 gone: %v", ll)
	}
}

func TestObserverFailover(t *testing.T) {
	ttl := 10 * time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	o := newObserver(ttl, keyNames(namesFlat, 4))
	for i := range 4 {
		who := "p1"
		if i == 3 {
			who = "p2"
		}
		o.apply(put(keyName(namesFlat, i), who, t0))
	}
	kill := t0.Add(time.Second)
	if n := o.startFailover(kill, "p1", 4); n != 3 {
		t.Fatalf("startFailover: %d elections pending, want the 3 p1 leads", n)
	}
	o.apply(put(keyName(namesFlat, 0), "p1", t0.Add(900*time.Millisecond))) // late delivery of p1's own write
	o.apply(put(keyName(namesFlat, 0), "p2", t0.Add(ttl+time.Second)))
	o.apply(put(keyName(namesFlat, 1), "p3", t0.Add(ttl+300*time.Millisecond)))
	took, pending := o.failoverState()
	if len(took) != 2 || pending != 1 {
		t.Fatalf("failover: %v resolved, %d pending; want 2, 1", took, pending)
	}
	late := o.failoverLateness()
	if len(late) != 2 {
		t.Fatalf("lateness: %v", late)
	}
	for _, d := range late {
		if d != 100*time.Millisecond && d != 300*time.Millisecond {
			t.Fatalf("lateness %v: want 100ms (after p1's write at +900ms) or 300ms", d)
		}
	}

	// A node kill: every election needs a write after it, by anyone.
	at := t0.Add(ttl + 2*time.Second)
	if n := o.startFailover(at, "", 4); n != 4 {
		t.Fatalf("node failover: %d pending, want 4", n)
	}
	for i := range 4 {
		o.apply(put(keyName(namesFlat, i), "p2", at.Add(time.Duration(i+1)*time.Second)))
	}
	if took, pending := o.failoverState(); len(took) != 4 || pending != 0 || took[0] <= 0 {
		t.Fatalf("node failover: %v, %d pending", took, pending)
	}
}

func TestProcReaders(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	if _, err := benchproc.CPUTicks(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	rss, err := rssMB(os.Getpid())
	if err != nil || rss <= 0 {
		t.Fatalf("rssMB: %v, %v", rss, err)
	}
}

func TestFlags(t *testing.T) {
	s, err := parseFlags([]string{"-smoke"})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.sizes) != 1 || s.sizes[0] != 30 || s.ttl != 2*time.Second || s.cluster != 0 || s.maxFailover != 5*time.Second {
		t.Fatalf("smoke settings: %+v", s)
	}
	s, err = parseFlags([]string{"-smoke", "-ttl", "3s", "-sizes", "1_000, 50"})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.sizes) != 2 || s.sizes[0] != 1000 || s.ttl != 3*time.Second || s.maxFailover != 6*time.Second {
		t.Fatalf("smoke with overrides: %+v", s)
	}
	if s.choria || s.names != namesFlat || s.shape != shapeOne {
		t.Fatalf("smoke: Choria %v, names %s, shape %s; want no Choria (TTL 2s), flat, one", s.choria, s.names, s.shape)
	}
	if got := s.announceModes(); len(got) != 2 || got[0] || !got[1] {
		t.Fatalf("smoke: announcements %v, want off then on", got)
	}
	for flag, want := range map[string][]bool{"on": {true}, "off": {false}, "both": {false, true}} {
		s, err := parseFlags([]string{"-announce", flag, "-choria=false", "-ttl", "2s"})
		if err != nil || !slices.Equal(s.announceModes(), want) {
			t.Fatalf("-announce %s: %v, %v; want %v", flag, s.announceModes(), err, want)
		}
	}
	s, err = parseFlags([]string{"-shape", "many", "-sizes", "1000", "-cluster", "0"})
	if err != nil {
		t.Fatal(err)
	}
	if s.procs != 200 || s.keys != 5 || s.perProc(1000) != 5 || !s.choria {
		t.Fatalf("many: %+v", s)
	}
	for _, bad := range [][]string{{"-ttl", "1500ms"}, {"-procs", "1"}, {"-sizes", "x"}, {"-sizes", "0", "-cluster", "0"},
		{"-ttl", "2s"}, {"-names", "odd"}, {"-shape", "few"}, {"-shape", "many", "-sizes", "2000", "-cluster", "0"},
		{"-shape", "many", "-sizes", "1000"}, {"-announce", "maybe"},
		{"-choria-ttl", "2s"}, {"-choria-ttl", "4500ms"}, {"-choria-ttl", "15s", "-choria=false"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
	s, err = parseFlags([]string{"-sizes", "1000"})
	if err != nil || s.choriaTTL != s.ttl {
		t.Fatalf("Choria's TTL by default: %v, %v; want -ttl's %v", s.choriaTTL, err, s.ttl)
	}
	s, err = parseFlags([]string{"-ttl", "2s", "-choria-ttl", "4s"})
	if err != nil || s.ttl != 2*time.Second || s.choriaTTL != 4*time.Second {
		t.Fatalf("-ttl 2s -choria-ttl 4s: %+v, %v", s, err)
	}
	if !childRequested([]string{"-child", "-child-config", "x"}) || childRequested([]string{"-smoke"}) {
		t.Error("childRequested")
	}
}

func TestFormats(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 10000: "10,000", 1234567: "1,234,567"} {
		if got := num(n); got != want {
			t.Errorf("num(%d) = %q, want %q", n, got, want)
		}
	}
	ds := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if pct(ds, 50) != 5 || pct(ds, 99) != 10 || pct(nil, 50) != 0 {
		t.Errorf("pct: %v %v", pct(ds, 50), pct(ds, 99))
	}
	for _, c := range []struct {
		mode string
		i    int
		want string
	}{{namesFlat, 0, "svc1"}, {namesFlat, 41, "svc42"}, {namesDotted, 41, "svc.42"}, {namesMixed, 0, "svc1"}, {namesMixed, 1, "svc.2"}, {namesMixed, 2, "team2.svc3"}, {namesMixed, 53, "team3.svc54"}} {
		if got := keyName(c.mode, c.i); got != c.want {
			t.Errorf("keyName(%s, %d) = %q, want %q", c.mode, c.i, got, c.want)
		}
	}
}

func TestReportNamesEachLibrarysTTL(t *testing.T) {
	s, err := parseFlags([]string{"-sizes", "100", "-cluster", "0", "-ttl", "30s", "-choria-ttl", "15s"})
	if err != nil {
		t.Fatal(err)
	}
	rs := []*result{
		{lib: libConclave, announce: true, names: namesFlat, shape: shapeOne, elections: 100, nodes: 1, procs: 3, perProc: 100, ttl: 30 * time.Second, led: 100, allLed: time.Second, steady: &steady{brokerCores: 0.2}},
		{lib: libChoria, names: namesFlat, shape: shapeOne, elections: 100, nodes: 1, procs: 3, perProc: 100, ttl: 15 * time.Second, led: 100, allLed: 2 * time.Second, steady: &steady{brokerCores: 0.4}},
	}
	var b strings.Builder
	printReport(&b, s, rs, time.Minute)
	out := b.String()
	for _, want := range []string{"TTL 30s (Choria's candidates 15s)", "Conclave's 30s, Choria's 15s", "Conclave (30s) and about two for Choria (30s)", "| 0.50× |"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report does not say %q:\n%s", want, out)
		}
	}
}
