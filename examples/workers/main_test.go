package main

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave/inter"
	election "github.com/conclave-io/conclave/providers/election/streams"
)

// endingFramework hands out elections whose Start returns err at once, as
// a campaign the broker refuses (conclave.ErrPermissionDenied) or whose
// connection closes does.
type endingFramework struct{ err error }

func (f endingFramework) Identity() string { return "n1" }

func (f endingFramework) Logger(component string) *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l.WithField("component", component)
}

func (f endingFramework) NewElection(context.Context, *nats.Conn, string, ...election.Option) (inter.Election, error) {
	return endingElection{f.err}, nil
}

type endingElection struct{ err error }

func (e endingElection) Start(context.Context) error { return e.err }
func (e endingElection) Stop()                       {}
func (e endingElection) IsLeader() bool              { return false }

// TestACampaignThatEndsReturnsItsError: a worker whose campaign ends with
// an error while the program runs returns that error, so that run stops
// the other workers and reports it, instead of waiting for Ctrl-C.
func TestACampaignThatEndsReturnsItsError(t *testing.T) {
	refused := errors.New("permission denied")
	fw := endingFramework{refused}
	m := &member{id: 1, log: fw.Logger("worker")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.campaign(ctx, fw) }()
	select {
	case err := <-done:
		if !errors.Is(err, refused) {
			t.Fatalf("campaign = %v, want the campaign's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("campaign did not return within 10s of its election ending with an error")
	}
}
