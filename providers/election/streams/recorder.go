package streams

import "time"

// Recorder is told what an election does, for metrics. Its methods are called
// from the election's goroutine and must not block. key is the election key.
type Recorder interface {
	// Campaign counts an attempt to win (CandidateState) or a renewal (LeaderState).
	Campaign(key string, state State)
	// Won counts a term that began.
	Won(key string)
	// Lost counts a term that ended, by cause.
	Lost(key string, cause Cause)
	// Renewed records a successful renewal and how long its request took.
	Renewed(key string, latency time.Duration)
	// Leading reports whether this candidate now leads.
	Leading(key string, leading bool)
}

// StartRecorder is a Recorder that is also told when a candidate starts to
// campaign, before its first attempt (a standby facing a held key may not
// attempt for a whole TTL), so that it can report the election at once. The
// election calls Started once per Start, after the bucket's settings are
// read, from its own goroutine; it must not block.
type StartRecorder interface {
	Recorder
	// Started says that a candidate of election key began to campaign.
	Started(key string)
}

type nopRecorder struct{}

func (nopRecorder) Campaign(string, State)        {}
func (nopRecorder) Won(string)                    {}
func (nopRecorder) Lost(string, Cause)            {}
func (nopRecorder) Renewed(string, time.Duration) {}
func (nopRecorder) Leading(string, bool)          {}
