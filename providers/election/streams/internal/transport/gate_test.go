package transport

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// enterAsync asks g for a turn of priority p on a goroutine and returns a
// channel that receives the function ending the turn once it is granted
// (or nil, if entering failed).
func enterAsync(t *testing.T, ctx context.Context, g *gate, p Priority) <-chan func() {
	t.Helper()
	c := make(chan func(), 1)
	go func() {
		leave, err := g.enter(WithPriority(ctx, p), Routine)
		if err != nil {
			leave = nil
		}
		c <- leave
	}()
	return c
}

// waiters returns how many turns of priority p wait at g.
func waiters(g *gate, p Priority) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, t := range g.waiting[p] {
		if !t.done {
			n++
		}
	}
	return n
}

// takeTurn waits for the turn c is granted and ends it, failing with
// what if none comes.
func takeTurn(t *testing.T, c <-chan func(), what string) {
	t.Helper()
	select {
	case leave := <-c:
		if leave == nil {
			t.Fatalf("%s: the request failed", what)
		}
		leave()
	case <-time.After(5 * time.Second):
		t.Fatal(what)
	}
}

func granted(c <-chan func()) (func(), bool) {
	select {
	case leave := <-c:
		return leave, true
	default:
		return nil, false
	}
}

// TestGateAdmitsAtMostItsLimitUrgentFirst: a gate lets limit requests in
// at once; the next wait, and as turns end the urgent ones waiting go
// first, then writes, then reads, each class in the order it came.
func TestGateAdmitsAtMostItsLimitUrgentFirst(t *testing.T) {
	g := &gate{limit: 2}
	ctx := context.Background()
	var leaves []func()
	for range 2 {
		leave, err := g.enter(ctx, Routine)
		if err != nil {
			t.Fatal(err)
		}
		leaves = append(leaves, leave)
	}
	r1 := enterAsync(t, ctx, g, Routine)
	eventually(t, 5*time.Second, "the first routine request to wait", func() bool { return waiters(g, Routine) == 1 })
	r2 := enterAsync(t, ctx, g, Routine)
	eventually(t, 5*time.Second, "the second routine request to wait", func() bool { return waiters(g, Routine) == 2 })
	u1 := enterAsync(t, ctx, g, Urgent)
	eventually(t, 5*time.Second, "the urgent request to wait", func() bool { return waiters(g, Urgent) == 1 })
	u2 := enterAsync(t, ctx, g, Urgent)
	eventually(t, 5*time.Second, "the second urgent request to wait", func() bool { return waiters(g, Urgent) == 2 })
	w1 := enterAsync(t, ctx, g, Writes)
	eventually(t, 5*time.Second, "the write to wait", func() bool { return waiters(g, Writes) == 1 })
	for _, c := range []<-chan func(){r1, r2, u1, u2, w1} {
		if _, ok := granted(c); ok {
			t.Fatal("a request was let in past the limit")
		}
	}

	// Each turn that ends lets in exactly the next one: u1, u2, w1, r1, r2.
	order := []struct {
		name string
		c    <-chan func()
	}{{"u1", u1}, {"u2", u2}, {"w1", w1}, {"r1", r1}, {"r2", r2}}
	for i, next := range order {
		leaves[0]()
		leaves = leaves[1:]
		var leave func()
		select {
		case leave = <-next.c:
		case <-time.After(5 * time.Second):
			t.Fatalf("turn %d: %s was not let in", i, next.name)
		}
		if leave == nil {
			t.Fatalf("%s failed to enter", next.name)
		}
		for _, later := range order[i+1:] {
			if _, ok := granted(later.c); ok {
				t.Fatalf("%s was let in with %s, past the limit or out of order", later.name, next.name)
			}
		}
		leaves = append(leaves, leave)
	}
	for _, leave := range leaves {
		leave()
	}
	if g.inFlight != 0 {
		t.Fatalf("%d in flight after every turn ended", g.inFlight)
	}
}

// TestGateRequestGivesUpUnsent: a request whose context ends while it
// waits fails with ErrNotSent and its context's error, its place is not
// held, and a later request gets the turn.
func TestGateRequestGivesUpUnsent(t *testing.T) {
	g := &gate{limit: 1}
	leave, err := g.enter(context.Background(), Routine)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = g.enter(WithPriority(ctx, Urgent), Routine)
	if !errors.Is(err, ErrNotSent) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNotSent and the deadline", err)
	}
	next := enterAsync(t, context.Background(), g, Routine)
	eventually(t, 5*time.Second, "the next request to wait", func() bool { return waiters(g, Routine) == 1 })
	leave()
	takeTurn(t, next, "the turn given up was not handed on")
	if g.inFlight != 0 {
		t.Fatalf("%d in flight after every turn ended", g.inFlight)
	}
}

// TestGateUnderRaces: many requests entering, some giving up, never exceed
// the limit together and leave nothing in flight (run with -race).
func TestGateUnderRaces(t *testing.T) {
	g := &gate{limit: 4}
	var mu = make(chan struct{}, 1)
	in, most := 0, 0
	done := make(chan error, 200)
	for i := range 200 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%7)*time.Millisecond)
			defer cancel()
			if i%3 == 0 {
				ctx = WithPriority(ctx, Urgent)
			}
			leave, err := g.enter(ctx, Routine)
			if err != nil {
				if !errors.Is(err, ErrNotSent) {
					done <- fmt.Errorf("request %d: %w", i, err)
					return
				}
				done <- nil
				return
			}
			mu <- struct{}{}
			in++
			most = max(most, in)
			<-mu
			time.Sleep(time.Millisecond)
			mu <- struct{}{}
			in--
			<-mu
			leave()
			done <- nil
		}()
	}
	for range 200 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if most > 4 || most == 0 {
		t.Fatalf("at most %d requests in at once, want 1 to 4", most)
	}
	if g.inFlight != 0 {
		t.Fatalf("%d in flight after every request ended", g.inFlight)
	}
}

// TestGateRefusesATurnThatCameTooLate: a request whose turn comes with
// less than a quarter of the time it had when it began to wait is not
// sent, and fails at once with ErrNotSent rather than time out at the
// broker with its outcome unknown; the turn goes to the next one. (Here
// the request is made to look as if it had waited 8.5 s of 10.)
func TestGateRefusesATurnThatCameTooLate(t *testing.T) {
	g := &gate{limit: 1}
	leave, err := g.enter(context.Background(), Routine)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	late := make(chan error, 1)
	go func() {
		l, err := g.enter(ctx, Routine)
		if err == nil {
			l()
		}
		late <- err
	}()
	eventually(t, 5*time.Second, "the request to wait", func() bool { return waiters(g, Routine) == 1 })
	g.mu.Lock()
	g.waiting[Routine][0].budget = 10 * time.Second
	g.mu.Unlock()
	next := enterAsync(t, context.Background(), g, Routine)
	eventually(t, 5*time.Second, "the next request to wait", func() bool { return waiters(g, Routine) == 2 })
	leave() // 1.5 s less a moment left: under a quarter of 10 s
	select {
	case err := <-late:
		if !errors.Is(err, ErrNotSent) {
			t.Fatalf("got %v, want ErrNotSent", err)
		}
		if ctx.Err() != nil {
			t.Fatal("refused only when its own time ran out, want at once")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the late request was neither refused nor granted")
	}
	takeTurn(t, next, "the refused turn was not handed on")
	if g.inFlight != 0 {
		t.Fatalf("%d in flight after every turn ended", g.inFlight)
	}
}

// TestGateLeastLeft: the least time left a turn is sent with is a quarter
// of its budget, or twice what requests took lately, but never more than
// half its budget: a slow broker does not make the gate refuse everything.
func TestGateLeastLeft(t *testing.T) {
	for _, c := range []struct{ budget, took, want time.Duration }{
		{4 * time.Second, 0, time.Second},
		{4 * time.Second, 700 * time.Millisecond, 1400 * time.Millisecond},
		{4 * time.Second, 3 * time.Second, 2 * time.Second},
		{200 * time.Millisecond, time.Second, 100 * time.Millisecond},
	} {
		if got := (&turn{budget: c.budget}).leastLeft(c.took); got != c.want {
			t.Errorf("budget %v, took %v: %v, want %v", c.budget, c.took, got, c.want)
		}
	}
}

// TestGateSlowBrokerStillServesUrgentFirst: once the moving average of
// request times passes half a request's timeout (a broker slowed down, or
// requests that timed out there), every request that has to wait for a
// turn is refused at its turn, with most of its time left, urgent ones
// included, while one that finds a free slot goes at once whatever its
// class. A leader's renewal queued behind 64 reads is refused, and the read
// arriving just after it takes the slot its refusal left.
// Before leastLeft capped the bar at half a turn's budget, the renewal
// was refused.
func TestGateSlowBrokerStillServesUrgentFirst(t *testing.T) {
	g := &gate{limit: 1}
	timeout := time.Second
	g.took = timeout * 6 / 10 // requests took 0.6 of a timeout lately
	leave, err := g.enter(context.Background(), Routine)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	u := enterAsync(t, ctx, g, Urgent)
	eventually(t, 5*time.Second, "the renewal to wait", func() bool { return waiters(g, Urgent) == 1 })
	leave() // a slot frees at once: the renewal has nearly all its time left
	var urgent func()
	select {
	case urgent = <-u:
	case <-time.After(5 * time.Second):
		t.Fatal("the renewal got no answer")
	}
	if urgent == nil {
		// And a routine read now takes the free slot at once.
		rl, rerr := g.enter(context.Background(), Routine)
		if rerr == nil {
			rl()
		}
		t.Fatalf("the renewal was refused with ~%v of its %v left (moving average %v); a read that came after it was let in: %v", timeout, timeout, g.took, rerr == nil)
	}
	urgent()
}
