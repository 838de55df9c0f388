package logging

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"
)

// recorder is an slog handler that keeps the records it is given.
type recorder struct {
	level slog.Level
	mu    sync.Mutex
	recs  []slog.Record
}

func (r *recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= r.level }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func attrs(rec slog.Record) map[string]any {
	m := map[string]any{}
	rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.Any(); return true })
	return m
}

func TestToSlogLevels(t *testing.T) {
	for _, tc := range []struct {
		logrus logrus.Level
		slog   slog.Level
	}{
		{logrus.TraceLevel, LevelTrace},
		{logrus.DebugLevel, slog.LevelDebug},
		{logrus.InfoLevel, slog.LevelInfo},
		{logrus.WarnLevel, slog.LevelWarn},
		{logrus.ErrorLevel, slog.LevelError},
	} {
		t.Run(tc.logrus.String(), func(t *testing.T) {
			rec := &recorder{level: LevelTrace}
			l := ToSlog(slog.New(rec))
			err := errors.New("boom")
			l.WithField("component", "election").WithField("election", "app").WithError(err).Logf(tc.logrus, "line %d", 1)
			if len(rec.recs) != 1 {
				t.Fatalf("%d records, want 1", len(rec.recs))
			}
			r := rec.recs[0]
			if r.Level != tc.slog || r.Message != "line 1" || r.Time.IsZero() {
				t.Errorf("record %v %q at %v, want %v %q with a time", r.Level, r.Message, r.Time, tc.slog, "line 1")
			}
			a := attrs(r)
			if a["component"] != "election" || a["election"] != "app" || a["error"] != err {
				t.Errorf("attributes %v, want component, election and error", a)
			}
		})
	}
}

func TestToSlogLevelFollowsTheHandler(t *testing.T) {
	for _, tc := range []struct {
		handler slog.Level
		want    logrus.Level
	}{
		{LevelTrace, logrus.TraceLevel},
		{slog.LevelDebug, logrus.DebugLevel},
		{slog.LevelInfo, logrus.InfoLevel},
		{slog.LevelWarn, logrus.WarnLevel},
		{slog.LevelError, logrus.ErrorLevel},
		{slog.LevelError + 4, logrus.ErrorLevel},
	} {
		rec := &recorder{level: tc.handler}
		l := ToSlog(slog.New(rec))
		if got := l.GetLevel(); got != tc.want {
			t.Errorf("handler at %v: logrus level %v, want %v", tc.handler, got, tc.want)
		}
		l.Debug("detail")
		l.Error("failure")
		if tc.handler > slog.LevelError && len(rec.recs) != 0 {
			t.Errorf("handler at %v got %d records, want none", tc.handler, len(rec.recs))
		}
		for _, r := range rec.recs {
			if r.Level < tc.handler {
				t.Errorf("handler at %v got a record at %v", tc.handler, r.Level)
			}
		}
	}
}
