package streams

import "time"

// Recorder is told what an election does, for metrics (package metrics has
// a Prometheus one). Its methods are called from the election's or the
// observer's own goroutine, never under a lock of the election's, and must
// not block. key is the election key.
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
	// Started says that a candidate of election key began to campaign:
	// once per Start, after the bucket's settings are read and before its
	// first attempt (which may be a TTL away).
	Started(key string)
	// Standing says, when the count changes, that reporter counts healthy
	// and unhealthy candidates standing in election key, itself included
	// (a candidate's total is at least 1, an observer's may be 0), as a
	// leader or an observer hears their announcements (see
	// standing.Candidate). A standby counts itself alone; a leader counts
	// the whole election once it has asked who stands (within half its
	// minimum term of winning) or heard an interval of announcements. A
	// candidate silent for two and a half announcement intervals is no
	// longer counted. reporter is the candidate's identity/instance (copies
	// under one identity report apart), or "observer" and a number unique
	// in the process for an Observer given WithRecorder.
	Standing(key, reporter string, healthy, unhealthy int)
	// StandingWithdrawn says that reporter no longer counts the candidates
	// of election key: it stopped. It is called once, after its last
	// Standing.
	StandingWithdrawn(key, reporter string)
}

// nopRecorder is the recorder of an election given none.
type nopRecorder struct{}

func (nopRecorder) Campaign(string, State)            {}
func (nopRecorder) Won(string)                        {}
func (nopRecorder) Lost(string, Cause)                {}
func (nopRecorder) Renewed(string, time.Duration)     {}
func (nopRecorder) Leading(string, bool)              {}
func (nopRecorder) Started(string)                    {}
func (nopRecorder) Standing(string, string, int, int) {}
func (nopRecorder) StandingWithdrawn(string, string)  {}
