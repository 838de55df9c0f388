package clocktest

import (
	"testing"
	"time"
)

func TestFakeTimersFireOnlyWhenDue(t *testing.T) {
	start := time.Unix(1000, 0)
	f := New(start)
	early, late := f.NewTimer(time.Second), f.NewTimer(3*time.Second)
	if f.Waiters() != 2 {
		t.Fatalf("Waiters = %d, want 2", f.Waiters())
	}
	f.Advance(999 * time.Millisecond)
	select {
	case <-early.C():
		t.Fatal("timer fired before its deadline")
	default:
	}
	f.Advance(time.Millisecond)
	select {
	case at := <-early.C():
		if !at.Equal(start.Add(time.Second)) {
			t.Fatalf("fired at %v", at)
		}
	default:
		t.Fatal("timer did not fire at its deadline")
	}
	if !late.Stop() || late.Stop() {
		t.Fatal("Stop should report active once")
	}
	f.Advance(time.Hour)
	select {
	case <-late.C():
		t.Fatal("stopped timer fired")
	default:
	}
	late.Reset(0)
	select {
	case <-late.C():
	default:
		t.Fatal("Reset(0) did not fire at once")
	}
	if got := f.Now(); !got.Equal(start.Add(time.Hour + time.Second)) {
		t.Fatalf("Now = %v", got)
	}
}
