package streams

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestTurnsRunAtMostMaxAtOnceInOrder: turns runs what it is given at most
// max at a time, taking each in the order given (one at a time: started in
// that order), and every one runs; run says which wait, and onIdle is
// called only once every one has returned.
func TestTurnsRunAtMostMaxAtOnceInOrder(t *testing.T) {
	t.Parallel()
	for _, max := range []int{1, 3} {
		t.Run(fmt.Sprint(max), func(t *testing.T) { testTurns(t, max) })
	}
}

func testTurns(t *testing.T, max int) {
	const n = 40
	tr := &turns{max: max}
	var returned, idleEarly, idled atomic.Int32
	tr.onIdle = func() {
		if returned.Load() != n {
			idleEarly.Add(1)
		}
		idled.Add(1)
	}
	var mu sync.Mutex
	var started []int
	running, most := 0, 0
	release := make(chan struct{})
	var all sync.WaitGroup
	all.Add(n)
	for i := range n {
		waits := tr.run(func() {
			defer all.Done()
			defer returned.Add(1)
			mu.Lock()
			started = append(started, i)
			running++
			if running > most {
				most = running
			}
			mu.Unlock()
			<-release
			mu.Lock()
			running--
			mu.Unlock()
		})
		if want := i >= max; waits != want {
			t.Errorf("run of the %dth said it waits: %v, want %v", i, waits, want)
		}
	}
	eventually(t, 5*time.Second, "the first turns to start", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(started) == max
	})
	close(release)
	all.Wait()
	if most > max {
		t.Errorf("%d ran at once, want at most %d", most, max)
	}
	if got := tr.count(); got != n {
		t.Errorf("count says %d were given to run, want %d", got, n)
	}
	if len(started) != n || max == 1 && !slices.IsSorted(started) {
		t.Errorf("started %v, want all %d, one at a time in the order given", started, n)
	}
	// Each goroutine gives up its place once its last function returned.
	eventually(t, 5*time.Second, "no turn in flight or waiting once all ran", func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.inFlight == 0 && len(tr.waiting) == 0
	})
	eventually(t, 5*time.Second, "onIdle once all ran", func() bool { return idled.Load() > 0 })
	if n := idleEarly.Load(); n != 0 {
		t.Errorf("onIdle was called %d times before every function returned", n)
	}
}
