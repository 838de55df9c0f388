// Package inter holds the small interfaces programs use to take part in
// elections without depending on how they are provided.
//
// It imports logrus, nats.go and the election options because seed programs
// written for Choria (whose interfaces these mirror) use fw.Logger(...)
// as a *logrus.Entry and pass election options to fw.NewElection.
package inter

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave/providers/election/streams"
)

// Election is a campaign in one election.
type Election interface {
	// Start campaigns until ctx ends or Stop is called.
	Start(ctx context.Context) error
	// Stop ends the campaign; it does not wait.
	Stop()
	// IsLeader reports whether this candidate leads at this instant.
	IsLeader() bool
}

// Framework hands out elections over a shared connection under one identity.
type Framework interface {
	// Identity is the name candidates of this framework campaign under.
	Identity() string
	// Logger returns a logger for a component.
	Logger(component string) *logrus.Entry
	// NewElection returns a candidate in election name over conn, or the
	// framework's shared connection when conn is nil.
	NewElection(ctx context.Context, conn *nats.Conn, name string, opts ...streams.Option) (Election, error)
}

var _ Election = (*streams.Election)(nil)
