package conclave_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/internal/logtest"
)

// below counts rec's records under level.
func below(rec *logtest.SlogRecorder, level slog.Level) int {
	n := 0
	for _, rec := range rec.Records() {
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
			rec := &logtest.SlogRecorder{Level: tc.level}
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
				got := rec.Find(w.text)
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
			if n := below(rec, tc.level); n > 0 {
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
