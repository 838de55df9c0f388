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

type nopRecorder struct{}

func (nopRecorder) Campaign(string, State)        {}
func (nopRecorder) Won(string)                    {}
func (nopRecorder) Lost(string, Cause)            {}
func (nopRecorder) Renewed(string, time.Duration) {}
func (nopRecorder) Leading(string, bool)          {}
