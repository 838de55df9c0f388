package conclave_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave"
)

// slogRecorder is an slog handler that keeps the records it is given.
type slogRecorder struct {
	level slog.Level
	mu    sync.Mutex
	recs  []slog.Record
}

func (r *slogRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= r.level }
func (r *slogRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}
func (r *slogRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *slogRecorder) WithGroup(string) slog.Handler      { return r }

// find returns the records whose message contains text.
func (r *slogRecorder) find(text string) []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []slog.Record
	for _, rec := range r.recs {
		if strings.Contains(rec.Message, text) {
			out = append(out, rec)
		}
	}
	return out
}

func (r *slogRecorder) below(level slog.Level) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.recs {
		if rec.Level < level {
			n++
		}
	}
	return n
}

func attrOf(rec slog.Record, key string) any {
	var v any
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.Any()
			return false
		}
		return true
	})
	return v
}

// TestWithSlogCapturesAnElection: an election of a framework built
// WithSlog logs its term through slog, at the levels the election uses
// (became leader and stopped leading at info, campaigning and released at
// debug), with the component and the election as attributes; a handler at
// info gets no debug line.
func TestWithSlogCapturesAnElection(t *testing.T) {
	b := startBroker(t)
	for _, tc := range []struct {
		name  string
		level slog.Level
	}{{"debug", slog.LevelDebug}, {"info", slog.LevelInfo}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &slogRecorder{level: tc.level}
			fw, err := conclave.NewWithConfig(testConfig("slog-node", b.ClientURL()), conclave.WithSlog(slog.New(rec)))
			if err != nil {
				t.Fatal(err)
			}
			defer fw.Close()
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			name := "slogged_" + tc.name
			c := newCandidate()
			e, err := fw.NewElection(ctx, nil, name, c.callbacks()...)
			if err != nil {
				t.Fatal(err)
			}
			c.start(t, e)
			await(t, c.won, "win")
			c.stop(t)

			want := []struct {
				text  string
				level slog.Level
			}{
				{"slog-node became leader", slog.LevelInfo},
				{"slog-node stopped leading", slog.LevelInfo},
				{"slog-node campaigning", slog.LevelDebug},
				{"released revision", slog.LevelDebug},
			}
			for _, w := range want {
				got := rec.find(w.text)
				if w.level < tc.level {
					if len(got) != 0 {
						t.Errorf("handler at %v got %q at %v", tc.level, w.text, got[0].Level)
					}
					continue
				}
				if len(got) != 1 {
					t.Errorf("%d records say %q, want 1", len(got), w.text)
					continue
				}
				r := got[0]
				if r.Level != w.level || attrOf(r, "component") != "election" || attrOf(r, "election") != name {
					t.Errorf("%q at %v with component %v, election %v; want %v, election, %s", r.Message, r.Level, attrOf(r, "component"), attrOf(r, "election"), w.level, name)
				}
			}
			if n := rec.below(tc.level); n > 0 {
				t.Errorf("handler at %v got %d records below it", tc.level, n)
			}
		})
	}
}

func TestWithSlogOptions(t *testing.T) {
	for name, opts := range map[string][]conclave.Option{
		"nil":  {conclave.WithSlog(nil)},
		"both": {conclave.WithSlog(slog.Default()), conclave.WithLogger(logrus.New())},
	} {
		if _, err := conclave.NewWithConfig(testConfig("n1"), opts...); !errors.Is(err, conclave.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
}
