package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// TestWorkerLoggerShowsNoNegativeWait: a wait the election reports after
// it is over ("leading in -1ms", after the d command) shows as 0s.
func TestWorkerLoggerShowsNoNegativeWait(t *testing.T) {
	var buf bytes.Buffer
	log := logrus.New()
	log.SetOutput(&buf)
	l := workerLogger{log: logrus.NewEntry(log), instance: "worker-3.0badcafe"}
	l.Infof("election %s: %s took the key; leading in %v", "demo", "vm", -time.Millisecond)
	if out := buf.String(); !strings.Contains(out, "worker-3.0badcafe: election demo: vm took the key; leading in 0s") {
		t.Errorf("logged %q, want the wait shown as 0s", out)
	}
}
