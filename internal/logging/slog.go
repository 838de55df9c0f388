package logging

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"slices"

	"github.com/sirupsen/logrus"
)

// LevelTrace is the slog level logrus's trace lines get: below debug, as
// slog suggests for levels it does not name.
const LevelTrace = slog.LevelDebug - 4

// ToSlog returns a logrus logger whose lines go to l: each entry becomes a
// record at the matching level (trace at LevelTrace, fatal and panic at
// error), with the entry's time, message and fields as attributes. The
// logger's level is the lowest that l's handler enables when ToSlog is
// called, so that nothing formats lines the handler would drop; lowering
// the handler's level later does not lower it.
func ToSlog(l *slog.Logger) *logrus.Logger {
	lg := logrus.New()
	lg.SetOutput(io.Discard)
	lg.SetFormatter(nopFormatter{})
	lg.SetLevel(lowestEnabled(l.Handler()))
	lg.AddHook(slogHook{h: l.Handler()})
	return lg
}

// lowestEnabled is the most detailed logrus level h enables.
func lowestEnabled(h slog.Handler) logrus.Level {
	for _, lvl := range []logrus.Level{logrus.TraceLevel, logrus.DebugLevel, logrus.InfoLevel, logrus.WarnLevel} {
		if h.Enabled(context.Background(), slogLevel(lvl)) {
			return lvl
		}
	}
	return logrus.ErrorLevel
}

// slogLevel maps a logrus level to slog's.
func slogLevel(lvl logrus.Level) slog.Level {
	switch lvl {
	case logrus.TraceLevel:
		return LevelTrace
	case logrus.DebugLevel:
		return slog.LevelDebug
	case logrus.InfoLevel:
		return slog.LevelInfo
	case logrus.WarnLevel:
		return slog.LevelWarn
	default: // error, fatal, panic
		return slog.LevelError
	}
}

// slogHook hands every entry to an slog handler.
type slogHook struct{ h slog.Handler }

func (slogHook) Levels() []logrus.Level { return logrus.AllLevels }

func (s slogHook) Fire(e *logrus.Entry) error {
	ctx := e.Context
	if ctx == nil {
		ctx = context.Background()
	}
	lvl := slogLevel(e.Level)
	if !s.h.Enabled(ctx, lvl) {
		return nil
	}
	r := slog.NewRecord(e.Time, lvl, e.Message, 0)
	for _, k := range slices.Sorted(maps.Keys(e.Data)) {
		r.AddAttrs(slog.Any(k, e.Data[k]))
	}
	return s.h.Handle(ctx, r)
}

// nopFormatter formats nothing: the hook has passed the entry on.
type nopFormatter struct{}

func (nopFormatter) Format(*logrus.Entry) ([]byte, error) { return nil, nil }
