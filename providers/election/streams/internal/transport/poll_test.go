package transport

import (
	"testing"
	"time"

	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/nats-io/nats.go/jetstream"
)

// subscriber returns a subscription of key on a hub without a broker,
// whose feed has delivered the key's state: what is sent to it next is a
// change.
func subscriber(t *testing.T, h *watchHub, key string) *hubWatch {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.newFeedLocked(key, "", key)
	s := &hubWatch{hub: h, feed: f, key: key}
	f.add(s)
	h.following[key]++
	return s
}

func entryAt(rev uint64) jetstream.KeyValueEntry {
	return keymsg.NewEntry("b", "k", []byte("x"), rev, time.Unix(0, 0), jetstream.KeyValuePut, 0)
}

// A subscription polled holds its deliveries without a channel, hands them
// out in order and tells Notify of each; Updates, called later, hands on
// what was left, in order, then the end. One that falls behind hands out
// what it holds, then ends with why.
func TestHubSubscriptionPollsWithoutAChannel(t *testing.T) {
	h := &watchHub{following: map[string]int{}, groupKeys: map[string]int{}}
	s := subscriber(t, h, "k")
	notified := 0
	s.Notify(func() { notified++ })
	if _, _, got := s.Poll(); got {
		t.Fatal("a new subscription delivered something")
	}
	h.mu.Lock()
	for rev := uint64(1); rev <= 3; rev++ {
		s.sendLocked(entryAt(rev))
	}
	h.mu.Unlock()
	if notified != 3 {
		t.Fatalf("notified %d times for 3 deliveries", notified)
	}
	if s.c != nil {
		t.Fatal("polling made a channel")
	}
	if ent, open, got := s.Poll(); !got || !open || ent.Revision() != 1 {
		t.Fatalf("first poll: %v, open %v, got %v; want revision 1", ent, open, got)
	}

	c := s.Updates()
	h.mu.Lock()
	s.sendLocked(entryAt(4))
	h.detachLocked(s, nil)
	h.mu.Unlock()
	var revs []uint64
	for ent := range c {
		revs = append(revs, ent.Revision())
	}
	if len(revs) != 3 || revs[0] != 2 || revs[1] != 3 || revs[2] != 4 {
		t.Fatalf("Updates after a poll gave revisions %v, want [2 3 4]", revs)
	}

	behind := subscriber(t, h, "k")
	h.mu.Lock()
	for rev := uint64(1); rev <= subBuffer+1; rev++ {
		behind.sendLocked(entryAt(rev))
	}
	h.mu.Unlock()
	for want := uint64(1); ; want++ {
		ent, open, got := behind.Poll()
		if !got {
			t.Fatal("an ended subscription has nothing to say")
		}
		if !open {
			if want != subBuffer+1 {
				t.Fatalf("ended after %d deliveries, want %d", want-1, subBuffer)
			}
			break
		}
		if ent.Revision() != want {
			t.Fatalf("delivery %d has revision %d", want, ent.Revision())
		}
	}
	if err := behind.Err(); err == nil || err.Error() != "the watch fell behind" {
		t.Fatalf("Err %v, want the watch fell behind", err)
	}
}
