package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// startProfiles starts reading a CPU profile of each broker over the
// steady-state window, when -profile asks for them, and returns a function
// that waits for them and returns the files written.
func (b *bench) startProfiles(ctx context.Context, e *env, r *result) func() []string {
	if b.set.profile == "" {
		return func() []string { return nil }
	}
	secs := int(b.set.window.Round(time.Second) / time.Second)
	var wg sync.WaitGroup
	files := make([]string, len(e.brokers))
	for i, br := range e.brokers {
		if br.pprofURL == "" {
			continue
		}
		name := fmt.Sprintf("broker-%s-%s-%s-%dx%d-%s.pprof", r.fileLabel(), r.shape, r.names, r.elections, r.procs, br.identity)
		path := filepath.Join(b.set.profile, name)
		wg.Go(func() {
			if err := fetchProfile(ctx, br.pprofURL, secs, path); err != nil {
				progress("profile of %s: %v", br.identity, err)
				return
			}
			files[i] = path
		})
	}
	return func() []string {
		wg.Wait()
		var out []string
		for _, f := range files {
			if f == "" {
				continue
			}
			out = append(out, f)
			top, err := pprofTop(ctx, f, 25, false)
			if err != nil {
				progress("go tool pprof -top %s: %v", f, err)
				continue
			}
			_ = os.WriteFile(f+".top.txt", top, 0o644)
			if cum, err := pprofTop(ctx, f, 40, true); err == nil {
				_ = os.WriteFile(f+".cum.txt", cum, 0o644)
			}
			progress("broker CPU profile over the window: %s (and -cum in %s.cum.txt); go tool pprof -top -nodecount=25 says:\n%s", f, f, top)
		}
		return out
	}
}

// fetchProfile reads /debug/pprof/profile?seconds=secs into path.
func fetchProfile(ctx context.Context, base string, secs int, path string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs+30)*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 500))
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pprofTop runs go tool pprof -top on a profile, sorted by cumulative
// time with cum.
func pprofTop(ctx context.Context, path string, nodes int, cum bool) ([]byte, error) {
	args := []string{"tool", "pprof", "-top", fmt.Sprintf("-nodecount=%d", nodes)}
	if cum {
		args = append(args, "-cum")
	}
	out, err := exec.CommandContext(ctx, "go", append(args, path)...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%w: %s", err, out)
	}
	return out, nil
}

// deliveryRatios is, per Conclave candidate process, the messages
// delivered on the bucket's subjects over the writes to its own keys, in
// order (0 writes counts as ratio 0 with 0 deliveries, else as +Inf).
func deliveryRatios(st *steady) []float64 {
	out := make([]float64, len(st.deliveries))
	for i, d := range st.deliveries {
		w := st.ownWrites[i]
		switch {
		case w > 0:
			out[i] = d / w
		case d > 0:
			out[i] = 1e9
		}
	}
	slices.Sort(out)
	return out
}

// pctF is the p-th percentile of sorted vs (nearest rank), 0 if empty.
func pctF(vs []float64, p float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	i := int(float64(len(vs))*p/100+0.999999) - 1
	return vs[min(max(i, 0), len(vs)-1)]
}
