package simkv_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/conclave-io/conclave/internal/simkv"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

const sec = time.Second

func mustRev(t *testing.T, want uint64) func(uint64, error) {
	t.Helper()
	return func(rev uint64, err error) {
		t.Helper()
		if err != nil || rev != want {
			t.Fatalf("got r%d %v, want r%d", rev, err, want)
		}
	}
}

func mustErr(t *testing.T, want error) func(uint64, error) {
	t.Helper()
	return func(rev uint64, err error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("got r%d %v, want %v", rev, err, want)
		}
	}
}

// latest returns "op value rN" or "none".
func latest(t *testing.T, b *simkv.Bucket, now time.Time, key string) string {
	t.Helper()
	m, err := b.Latest(now, key)
	if err != nil {
		t.Fatal(err)
	}
	if m == nil {
		return "none"
	}
	return fmt.Sprintf("%s %s r%d", m.Op, m.Value, m.Revision)
}

// drain returns what w has queued, as describeAll renders it.
func drain(w *simkv.Watcher) string {
	var ds []simkv.Delivery
	for d, ok := w.Next(); ok; d, ok = w.Next() {
		ds = append(ds, d)
	}
	return describeAll(ds)
}

func TestRevisionsAreSharedByKeys(t *testing.T) {
	b := simkv.New(t0, time.Minute, false)
	mustRev(t, 1)(b.Put(at(0), "a", []byte("x"), 0, 0))
	mustRev(t, 2)(b.Put(at(0), "b", []byte("y"), 0, 0))
	mustRev(t, 3)(b.Delete(at(0), "a", 1, []byte("bye")))
	if rev := b.Purge(at(0), "c"); rev != 4 {
		t.Fatalf("purge: r%d", rev)
	}
	b.Vanish(at(0), "b")
	mustRev(t, 5)(b.Put(at(0), "b", []byte("z"), 0, 0))
	mustErr(t, simkv.ErrWrongRevision)(b.Put(at(0), "a", []byte("x"), 1, 0))
	for key, want := range map[string]string{"a": `DEL bye r3`, "b": `PUT z r5`, "c": `PURGE  r4`} {
		if got := latest(t, b, at(0), key); got != want {
			t.Errorf("%s: %s, want %s", key, got, want)
		}
	}
}

func TestCompareAndSwap(t *testing.T) {
	b := simkv.New(t0, time.Minute, false)
	mustRev(t, 1)(b.Put(at(0), "e", []byte("a"), 0, 0))
	mustErr(t, simkv.ErrWrongRevision)(b.Put(at(0), "e", []byte("b"), 0, 0))
	mustRev(t, 2)(b.Put(at(0), "e", []byte("a"), 1, 0))
	mustErr(t, simkv.ErrWrongRevision)(b.Delete(at(0), "e", 1, []byte("rel")))
	mustRev(t, 3)(b.Delete(at(0), "e", 2, []byte("rel")))
	mustErr(t, simkv.ErrWrongRevision)(b.Put(at(0), "e", []byte("b"), 0, 0)) // a marker is a message
	mustRev(t, 4)(b.Put(at(0), "e", []byte("b"), 3, 0))
	b.Purge(at(0), "e")
	mustErr(t, simkv.ErrWrongRevision)(b.Put(at(0), "e", []byte("c"), 4, 0))
	mustRev(t, 6)(b.Put(at(0), "e", []byte("c"), 5, 0))
	b.Vanish(at(0), "e")
	mustErr(t, simkv.ErrWrongRevision)(b.Put(at(0), "e", []byte("d"), 6, 0))
	mustRev(t, 7)(b.Put(at(0), "e", []byte("d"), 0, 0))
	_, err := b.Put(at(0), "e", []byte("d"), 3, 0)
	if err == nil || !strings.Contains(err.Error(), "revision 7") {
		t.Fatalf("the error should say the key's revision: %v", err)
	}
}

func TestMsgTTLChecksInTheServersOrder(t *testing.T) {
	b := simkv.New(t0, time.Minute, false)
	mustRev(t, 1)(b.Put(at(0), "e", nil, 0, 0))
	mustErr(t, simkv.ErrMsgTTLDisabled)(b.Put(at(0), "e", nil, 9, sec))
	mustErr(t, simkv.ErrWrongRevision)(b.Put(at(0), "e", nil, 9, sec/2))
	mustErr(t, simkv.ErrInvalidMsgTTL)(b.Put(at(0), "e", nil, 1, sec/2))
	b = simkv.New(t0, time.Minute, true)
	mustErr(t, simkv.ErrWrongRevision)(b.Put(at(0), "e", nil, 9, sec/2))
	mustErr(t, simkv.ErrInvalidMsgTTL)(b.Put(at(0), "e", nil, 0, sec/2))
	mustRev(t, 1)(b.Put(at(0), "e", nil, 0, 1500*time.Millisecond))
	if !b.AllowsMsgTTL(at(0)) {
		t.Fatal("AllowsMsgTTL false")
	}
}

func TestExpiry(t *testing.T) {
	b := simkv.New(t0, 10*sec, true)
	late := map[uint64]time.Duration{2: 700 * time.Millisecond}
	b.SetLateness(func(rev uint64) time.Duration { return late[rev] })
	b.Put(at(0), "ttl", nil, 0, 1500*time.Millisecond) // r1: 1 s, whole seconds
	b.Put(at(0), "late", nil, 0, 0)                    // r2: MaxAge and 700 ms
	b.Put(at(0), "long", nil, 0, 60*sec)               // r3: MaxAge wins
	b.Delete(at(0), "marker", 0, []byte("rel"))        // r4: markers expire too
	w, _ := b.Watch(at(0), "late")
	drain(w)
	check := func(now time.Duration, want map[string]bool) {
		t.Helper()
		for key, there := range want {
			if got := latest(t, b, at(now), key) != "none"; got != there {
				t.Errorf("%v: %s there %v, want %v", now, key, got, there)
			}
		}
	}
	check(sec-1, map[string]bool{"ttl": true})
	check(sec, map[string]bool{"ttl": false})
	check(10*sec-1, map[string]bool{"late": true, "long": true, "marker": true})
	check(10*sec, map[string]bool{"late": true, "long": false, "marker": false})
	check(10*sec+700*time.Millisecond-1, map[string]bool{"late": true})
	check(10*sec+700*time.Millisecond, map[string]bool{"late": false})
	if got := drain(w); got != "[]" {
		t.Errorf("expiry delivered %s", got)
	}

	// SetTTL applies to stored messages from when they were written: lowered
	// below a message's age it removes it at once, raised it keeps it.
	b.Put(at(20*sec), "a", nil, 0, 0)
	b.Put(at(24*sec), "b", nil, 0, 0)
	b.SetTTL(at(25*sec), 3*sec)
	check(25*sec, map[string]bool{"a": false, "b": true})
	b.SetTTL(at(26*sec), 5*sec)
	check(29*sec-1, map[string]bool{"b": true})
	check(29*sec, map[string]bool{"b": false})
	if ttl, _, _ := b.Status(at(29 * sec)); ttl != 5*sec {
		t.Errorf("TTL %v", ttl)
	}
	// No MaxAge: only per-message TTLs expire.
	b.SetTTL(at(30*sec), 0)
	b.Put(at(30*sec), "c", nil, 0, 0)
	b.Put(at(30*sec), "d", nil, 0, 2*sec)
	check(time.Hour, map[string]bool{"c": true, "d": false})
}

func TestLatenessIsDrawnOncePerMessage(t *testing.T) {
	b := simkv.New(t0, sec, false)
	var calls []uint64
	b.SetLateness(func(rev uint64) time.Duration { calls = append(calls, rev); return -sec })
	for i := range 5 {
		now := at(time.Duration(i) * 100 * time.Millisecond)
		b.Put(now, fmt.Sprint(i%2), nil, 0, 0)
		b.Latest(now, "0")
		b.Status(now)
	}
	b.Advance(at(time.Hour))
	if fmt.Sprint(calls) != "[1 2]" {
		// keys 0 and 1 take r1 and r2; the later creates fail (wrong revision)
		t.Fatalf("lateness drawn for %v", calls)
	}
	b.Put(at(time.Hour), "0", nil, 0, 0)
	if latest(t, b, at(time.Hour+sec), "0") != "none" {
		t.Fatal("negative lateness should count as 0")
	}
}

func TestWatch(t *testing.T) {
	b := simkv.New(t0, time.Minute, false)
	empty, _ := b.Watch(at(0), "e")
	if got := drain(empty); got != "[<nil>]" {
		t.Fatalf("watch of an empty key: %s", got)
	}
	b.Put(at(0), "e", []byte("a"), 0, 0)
	b.Put(at(0), "other", []byte("x"), 0, 0)
	b.Delete(at(0), "e", 1, []byte("rel"))
	started, _ := b.Watch(at(0), "e")
	b.Vanish(at(0), "e")
	b.Purge(at(0), "e")
	if got, want := drain(empty), `[PUT "a" r1, DEL "rel" r3, PURGE "" r4]`; got != want {
		t.Errorf("watch: %s, want %s", got, want)
	}
	if started.Pending() != 3 {
		t.Errorf("pending %d", started.Pending())
	}
	if got, want := drain(started), `[DEL "rel" r3, <nil>, PURGE "" r4]`; got != want {
		t.Errorf("watch started on a marker: %s, want %s", got, want)
	}
	started.Stop()
	b.Put(at(0), "e", []byte("b"), 4, 0)
	if got := drain(started); got != "[]" {
		t.Errorf("stopped watch: %s", got)
	}
	if started.Ended() || started.Key() != "e" {
		t.Error("a stopped watch is not ended by the bucket")
	}
}

func TestWatchLagSkipsReplacedMessages(t *testing.T) {
	b := simkv.New(t0, time.Minute, false)
	b.SetWatchLag(func() time.Duration { return 10 * time.Millisecond })
	ms := time.Millisecond
	b.Put(at(0), "e", []byte("a"), 0, 0)
	w, _ := b.Watch(at(0), "e")
	b.Put(at(5*ms), "e", []byte("b"), 1, 0) // replaces a before it reaches w
	if w.Pending() != 0 {
		t.Fatal("delivered before its lag")
	}
	b.Advance(at(14 * ms))
	if got := drain(w); got != "[]" {
		t.Fatalf("at 14 ms: %s", got)
	}
	b.Advance(at(15 * ms))
	if got, want := drain(w), `[PUT "b" r2, <nil>]`; got != want {
		t.Fatalf("started on a replaced message: %s, want %s", got, want)
	}
	b.Delete(at(100*ms), "e", 2, []byte("rel")) // a release replaced at once
	b.Put(at(101*ms), "e", []byte("c"), 3, 0)
	b.Put(at(200*ms), "e", []byte("d"), 4, 0)
	b.Advance(at(time.Second))
	if got, want := drain(w), `[PUT "c" r4, PUT "d" r5]`; got != want {
		t.Fatalf("quick succession: %s, want %s", got, want)
	}

	// A watch whose starting message goes with nothing in its place ends
	// its initial values only after the key's next write.
	w2, _ := b.Watch(at(2*sec), "e")
	b.Vanish(at(2*sec+ms), "e")
	b.Advance(at(3 * sec))
	if w2.Pending() != 0 {
		t.Fatalf("watch of a vanished message: %s", drain(w2))
	}
	b.Put(at(3*sec), "e", []byte("f"), 0, 0)
	b.Advance(at(4 * sec))
	if got, want := drain(w2), `[PUT "f" r6, <nil>]`; got != want {
		t.Fatalf("watch of a vanished message: %s, want %s", got, want)
	}
}

func TestRemoveAndRecreate(t *testing.T) {
	b := simkv.New(t0, time.Minute, true)
	b.Put(at(0), "e", []byte("a"), 0, 0)
	b.Put(at(0), "e", []byte("b"), 1, 0)
	w, _ := b.Watch(at(0), "e")
	b.Remove(at(sec))
	if !w.Ended() || w.Pending() != 2 {
		t.Fatalf("watch of a removed bucket: ended %v, %d pending", w.Ended(), w.Pending())
	}
	mustErr(t, simkv.ErrNoBucket)(b.Put(at(sec), "e", nil, 0, 0))
	mustErr(t, simkv.ErrNoBucket)(b.Delete(at(sec), "e", 0, nil))
	if b.Purge(at(sec), "e") != 0 {
		t.Error("purge of a removed bucket")
	}
	b.Vanish(at(sec), "e")
	b.SetTTL(at(sec), sec)
	if _, err := b.Latest(at(sec), "e"); err != simkv.ErrNoBucket {
		t.Errorf("latest: %v", err)
	}
	if _, _, err := b.Status(at(sec)); err != simkv.ErrNoBucket {
		t.Errorf("status: %v", err)
	}
	if _, err := b.Watch(at(sec), "e"); err != simkv.ErrNoBucket {
		t.Errorf("watch: %v", err)
	}
	b.Recreate(at(2*sec), 5*sec, false)
	ttl, created, err := b.Status(at(2 * sec))
	if err != nil || ttl != 5*sec || !created.Equal(at(2*sec)) || b.AllowsMsgTTL(at(2*sec)) {
		t.Fatalf("recreated: %v %v %v", ttl, created, err)
	}
	mustRev(t, 1)(b.Put(at(2*sec), "e", []byte("c"), 0, 0))
	if got := drain(w); got != `[PUT "b" r2, <nil>]` {
		t.Errorf("old watch: %s", got)
	}
	// Recreate of a bucket that exists removes it first.
	w2, _ := b.Watch(at(3*sec), "e")
	b.Recreate(at(3*sec), 5*sec, false)
	if !w2.Ended() || latest(t, b, at(3*sec), "e") != "none" {
		t.Error("recreate over an existing bucket")
	}
}

func TestWatchReset(t *testing.T) {
	b := simkv.New(t0, time.Hour, false)
	b.SetWatchReset(func() time.Duration { return 20 * sec })
	for i := range 4 {
		b.Put(at(0), "e", []byte(fmt.Sprint("old", i)), uint64(i), 0) // r1 to r4
	}
	b.Put(at(0), "y", []byte("old"), 0, 0) // r5
	we, _ := b.Watch(at(0), "e")
	wy, _ := b.Watch(at(0), "y")
	drain(we)
	drain(wy)
	b.Remove(at(sec))
	b.Recreate(at(2*sec), time.Hour, false)
	mustRev(t, 1)(b.Put(at(2*sec), "e", []byte("new1"), 0, 0))
	b.Advance(at(21*sec - 1))
	if we.Pending()+wy.Pending() != 0 || we.Ended() {
		t.Fatal("a watch delivered before its reset")
	}
	b.Advance(at(21 * sec))
	if we.Pending() != 0 {
		t.Fatalf("r1 is below the watch's restart: %s", drain(we))
	}
	for i := 2; i <= 6; i++ {
		mustRev(t, uint64(i))(b.Put(at(22*sec), "e", []byte(fmt.Sprint("new", i)), uint64(i-1), 0))
	}
	if got, want := drain(we), `[PUT "new5" r5, PUT "new6" r6]`; got != want {
		t.Fatalf("resumed watch: %s, want %s", got, want)
	}
	if got, want := drain(wy), `[]`; got != want {
		t.Fatalf("resumed watch of a key without messages: %s, want %s", got, want)
	}

	// Removed again and missing at the reset: the watch ends.
	b.Remove(at(30 * sec))
	b.Advance(at(50*sec - 1))
	if we.Ended() {
		t.Fatal("ended before the reset")
	}
	b.Advance(at(50 * sec))
	if !we.Ended() || !wy.Ended() {
		t.Fatal("not ended at the reset of a missing bucket")
	}
}

// script runs a random but seeded workload on a bucket and returns a
// transcript of everything it saw.
func script(seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := simkv.New(t0, 2*sec, true)
	b.SetLateness(func(uint64) time.Duration { return time.Duration(rng.Int64N(int64(sec))) })
	b.SetWatchLag(func() time.Duration { return time.Duration(rng.Int64N(int64(5 * time.Millisecond))) })
	b.SetWatchReset(func() time.Duration { return 5*sec + time.Duration(rng.Int64N(int64(15*sec))) })
	var out strings.Builder
	var watches []*simkv.Watcher
	keys := []string{"a", "b", "c", "d"}
	now := t0
	for i := range 5000 {
		now = now.Add(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
		key := keys[rng.IntN(len(keys))]
		var expect uint64
		if m, err := b.Latest(now, key); err == nil && m != nil && rng.IntN(10) > 0 {
			expect = m.Revision
		}
		switch n := rng.IntN(100); {
		case n < 50:
			var ttl time.Duration
			if rng.IntN(3) == 0 {
				ttl = sec
			}
			rev, err := b.Put(now, key, []byte(fmt.Sprint(i)), expect, ttl)
			fmt.Fprintf(&out, "%d put %s r%d %v\n", i, key, rev, err)
		case n < 65:
			rev, err := b.Delete(now, key, expect, []byte("rel"))
			fmt.Fprintf(&out, "%d del %s r%d %v\n", i, key, rev, err)
		case n < 70:
			fmt.Fprintf(&out, "%d purge %s r%d\n", i, key, b.Purge(now, key))
		case n < 73:
			b.Vanish(now, key)
		case n < 80:
			if w, err := b.Watch(now, key); err == nil {
				watches = append(watches, w)
			}
		case n < 82:
			b.SetTTL(now, time.Duration(1+rng.IntN(3))*sec)
		case n < 83:
			b.Remove(now)
		case n < 85:
			b.Recreate(now, 2*sec, rng.IntN(2) == 0)
		case n < 88 && len(watches) > 0:
			watches[rng.IntN(len(watches))].Stop()
		}
		for _, k := range keys {
			m, err := b.Latest(now, k)
			fmt.Fprintf(&out, " %s=%s/%v", k, describe(m), err)
		}
		for j, w := range watches {
			if rng.IntN(4) == 0 {
				fmt.Fprintf(&out, " w%d%s%v", j, drain(w), w.Ended())
			}
		}
		out.WriteByte('\n')
	}
	return out.String()
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	a, b := script(7), script(7)
	if a != b {
		i := 0
		for i < len(a) && i < len(b) && a[i] == b[i] {
			i++
		}
		t.Fatalf("the same seed gave different runs, from %q", a[max(i-200, 0):min(i+200, len(a))])
	}
	if script(8) == a {
		t.Fatal("another seed gave the same run")
	}
	for _, want := range []string{"wrong last sequence", "bucket does not exist", "DEL", "PURGE", "<nil>", "true"} {
		if !strings.Contains(a, want) {
			t.Errorf("the workload never showed %q", want)
		}
	}
}
