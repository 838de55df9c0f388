package logging

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/conclave-io/conclave/internal/logtest"
	"github.com/sirupsen/logrus"
)

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
			rec := &logtest.SlogRecorder{Level: LevelTrace}
			l := ToSlog(slog.New(rec))
			err := errors.New("boom")
			l.WithField("component", "election").WithField("election", "app").WithError(err).Logf(tc.logrus, "line %d", 1)
			if len(rec.Records()) != 1 {
				t.Fatalf("%d records, want 1", len(rec.Records()))
			}
			r := rec.Records()[0]
			if r.Level != tc.slog || r.Message != "line 1" || r.Time.IsZero() {
				t.Errorf("record %v %q at %v, want %v %q with a time", r.Level, r.Message, r.Time, tc.slog, "line 1")
			}
			a := logtest.Attrs(r)
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
		rec := &logtest.SlogRecorder{Level: tc.handler}
		l := ToSlog(slog.New(rec))
		if got := l.GetLevel(); got != tc.want {
			t.Errorf("handler at %v: logrus level %v, want %v", tc.handler, got, tc.want)
		}
		l.Debug("detail")
		l.Error("failure")
		if tc.handler > slog.LevelError && len(rec.Records()) != 0 {
			t.Errorf("handler at %v got %d records, want none", tc.handler, len(rec.Records()))
		}
		for _, r := range rec.Records() {
			if r.Level < tc.handler {
				t.Errorf("handler at %v got a record at %v", tc.handler, r.Level)
			}
		}
	}
}
