package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
)

// group runs functions in the background and collects their errors; its
// locked serialises what they record.
type group struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

func newGroup() *group { return &group{} }

func (g *group) do(fn func() error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := fn(); err != nil {
			g.locked(func() { g.errs = append(g.errs, err) })
		}
	}()
}

func (g *group) goDur(fn func() (time.Duration, error), keep func(time.Duration)) {
	g.do(func() error {
		d, err := fn()
		if err == nil {
			g.locked(func() { keep(d) })
		}
		return err
	})
}

func (g *group) goDurs(fn func() ([]time.Duration, error), keep func([]time.Duration)) {
	g.do(func() error {
		ds, err := fn()
		if err == nil {
			g.locked(func() { keep(ds) })
		}
		return err
	})
}

func (g *group) locked(fn func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	fn()
}

func (g *group) wait() error {
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return errors.Join(g.errs...)
}

// rand75 returns a random duration in [0, 0.75×ttl): a random point of a
// Choria leader's campaign interval.
func rand75(ttl time.Duration) time.Duration { return rand.N(ttl * 3 / 4) }

func sortSteady(rs []steadyResult) {
	slices.SortFunc(rs, func(a, b steadyResult) int { return a.standbys - b.standbys })
}

// versions returns the Go version and the versions of the modules under
// test, from the binary's build information. The Conclave version says
// whether the given directories of the work tree (the code under test) have
// uncommitted changes.
func versions(tested ...string) map[string]string {
	v := map[string]string{"go": runtime.Version(), "conclave": conclaveVersion(tested)}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	for _, m := range bi.Deps {
		switch m.Path {
		case "github.com/choria-io/go-choria", "github.com/nats-io/nats-server/v2", "github.com/nats-io/nats.go":
			v[m.Path] = m.Version
		}
	}
	return v
}

// conclaveVersion describes the Conclave tree under test: the commit of the
// git work tree the benchmark runs in, and whether the directories tested
// (relative to its top) have uncommitted changes. The module uses Conclave
// through a replace directive, and the scale scenario builds the CLI from
// it, so what it measures is whatever that directory holds at build time.
func conclaveVersion(tested []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	git := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "git", args...).Output()
		return strings.TrimSpace(string(out)), err
	}
	head, err := git("rev-parse", "--short", "HEAD")
	if err != nil {
		return "the work tree (commit unknown)"
	}
	top, err := git("rev-parse", "--show-toplevel")
	if err != nil {
		return "commit " + head
	}
	var dirty []string
	for _, dir := range tested {
		if out, err := git("status", "--porcelain", "--", top+"/"+dir); err == nil && out != "" {
			dirty = append(dirty, dir)
		}
	}
	if len(dirty) > 0 {
		return "commit " + head + " with uncommitted changes in " + strings.Join(dirty, ", ")
	}
	return "commit " + head
}

// pct returns the p-th percentile of ds (nearest rank).
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}
