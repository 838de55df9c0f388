// Package logtest records what code logs through log/slog, for tests that
// check what was logged.
package logtest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// SlogRecorder is an slog.Handler that keeps every record at or above
// Level. Its attributes and groups are those of the records alone: WithAttrs
// and WithGroup return the recorder itself. It is safe for concurrent use.
type SlogRecorder struct {
	// Level is the lowest level kept.
	Level slog.Level

	mu   sync.Mutex
	recs []slog.Record
}

// Enabled reports whether l is at or above Level.
func (r *SlogRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= r.Level }

// Handle keeps rec.
func (r *SlogRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}

// WithAttrs returns r: attributes given this way are not recorded.
func (r *SlogRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup returns r: groups are not recorded.
func (r *SlogRecorder) WithGroup(string) slog.Handler { return r }

// Records returns a copy of the records kept so far.
func (r *SlogRecorder) Records() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]slog.Record(nil), r.recs...)
}

// Find returns the records whose message contains text.
func (r *SlogRecorder) Find(text string) []slog.Record {
	var out []slog.Record
	for _, rec := range r.Records() {
		if strings.Contains(rec.Message, text) {
			out = append(out, rec)
		}
	}
	return out
}

// Attrs returns rec's attributes by key.
func Attrs(rec slog.Record) map[string]any {
	m := map[string]any{}
	rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.Any(); return true })
	return m
}
