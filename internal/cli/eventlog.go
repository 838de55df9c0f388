package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// eventLog writes the log lines of the long-running commands to standard
// error: each starts with the local date and time, or, with --json, is one
// JSON object (time, event, election, identity, the event's attributes and
// the message as text). Safe for concurrent use.
type eventLog struct {
	mu       sync.Mutex
	w        io.Writer
	json     bool
	election string
	identity string
}

func newEventLog(w io.Writer, asJSON bool) *eventLog { return &eventLog{w: w, json: asJSON} }

// event logs one line: event names what happened for --json, attrs are its
// further fields (token, status, …), and format and args the text.
func (l *eventLog) event(event string, attrs map[string]any, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.json {
		fmt.Fprintf(l.w, "%s conclave: %s\n", now.Format(textTime), msg)
		return
	}
	obj := map[string]any{"time": formatJSONTime(now), "event": event, "message": msg}
	if l.election != "" {
		obj["election"] = l.election
	}
	if l.identity != "" {
		obj["identity"] = l.identity
	}
	for k, v := range attrs {
		obj[k] = v
	}
	if event == "error" {
		obj["error"] = msg // as in the error a command ends with
	}
	line, err := json.Marshal(obj)
	if err != nil {
		fmt.Fprintf(l.w, "%s conclave: %s\n", now.Format(textTime), msg)
		return
	}
	fmt.Fprintf(l.w, "%s\n", line)
}
