package streams

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestNotifierRunsInOrderAndIdlesWithoutAGoroutine: callbacks run one at
// a time in the order posted; an idle notifier holds no goroutine; close
// lets what is queued run first, and nothing posted after it runs.
func TestNotifierRunsInOrderAndIdlesWithoutAGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	n := newNotifier()
	if g := runtime.NumGoroutine(); g != before {
		t.Fatalf("a new notifier started %d goroutines", g-before)
	}
	var order []int
	var running, overlapped atomic.Int32
	release := make(chan struct{})
	var last <-chan struct{}
	for i := range 50 {
		last = n.post(func() {
			if running.Add(1) > 1 {
				overlapped.Store(1)
			}
			if i == 0 {
				<-release // the rest queue behind the first
			}
			order = append(order, i)
			running.Add(-1)
		})
	}
	close(release)
	select {
	case <-last:
	case <-time.After(10 * time.Second):
		t.Fatal("the last callback did not run")
	}
	for i, v := range order {
		if v != i {
			t.Fatalf("callbacks ran in the order %v", order)
		}
	}
	if overlapped.Load() != 0 {
		t.Fatal("two callbacks ran at once")
	}
	eventually(t, 10*time.Second, "the idle notifier's goroutine to end", func() bool { return runtime.NumGoroutine() <= before })

	ran := make(chan struct{})
	n.post(func() { time.Sleep(50 * time.Millisecond); close(ran) })
	n.close()
	select {
	case <-ran:
	default:
		t.Fatal("close returned before the queued callback ran")
	}
	after := n.post(func() { t.Error("a callback posted after close ran") })
	select {
	case <-after:
	case <-time.After(time.Second):
		t.Fatal("a post after close is not done at once")
	}
}
