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

// StandingRecorder is a Recorder that is also told how many candidates
// stand in the election, as a leader or an observer hears their
// announcements (see standing.Candidate): healthy and unhealthy, the candidate
// itself included. Only the leader hears the others, so a standby counts
// itself alone, and the most any reporter counts is the election's count
// once a Conclave leader whose process reports has asked who stands
// (within half its minimum term of winning) or heard an interval of
// announcements, or an observer follows the election. It costs no
// request but the one a candidate makes as it wins: the leader
// counts the announcements it hears anyway, and forgets a candidate
// silent for two and a half announcement intervals (two TTLs each,
// between 2s and 2 min).
//
// reporter names who counts: the candidate's identity, or "observer" and
// a number unique in the process for an Observer given
// ObserveWithRecorder. Standing is called when the count changes, and
// StandingWithdrawn once as the reporter stops; both from the reporter's
// own goroutine, never under a lock of the election's; they must not
// block.
type StandingRecorder interface {
	Recorder
	// Standing says that reporter counts healthy and unhealthy candidates
	// standing in election key. A candidate counts itself, so its total
	// is at least 1; an observer's may be 0.
	Standing(key, reporter string, healthy, unhealthy int)
	// StandingWithdrawn says that reporter no longer counts the
	// candidates of election key: it stopped.
	StandingWithdrawn(key, reporter string)
}

type nopRecorder struct{}

func (nopRecorder) Campaign(string, State)        {}
func (nopRecorder) Won(string)                    {}
func (nopRecorder) Lost(string, Cause)            {}
func (nopRecorder) Renewed(string, time.Duration) {}
func (nopRecorder) Leading(string, bool)          {}
