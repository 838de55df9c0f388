package streams

import (
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/providers/election/standing"
)

// localCopies holds each election's copies in this process: its stewards
// in one election of one bucket, over any connection (a program may give
// each candidate its own). A candidate reads its copies' health and
// stopping as they are now: when a process stops, their words of leaving
// reach its leader late, or after its stop offered one of them the key.
var localCopies = struct {
	mu sync.Mutex
	m  map[copiesKey]*copies
}{m: map[copiesKey]*copies{}}

// copiesKey is an election as a process's candidates reach it: the
// bucket's name and when it was made tell it apart from a bucket of that
// name on another broker; where the creation is unknown, the connection.
type copiesKey struct {
	nc          *nats.Conn
	bucket, key string
	born        time.Time
}

// copies are an election's stewards in this process: those running, and
// the last few that stopped while others ran on (left): the roll marks
// them leaving, as they no longer answer an offer of the key.
type copies struct {
	running []*steward
	left    []copyName
}

type copyName struct{ identity, instance string }

// maxLeftCopies bounds the copies remembered as stopped, per election.
const maxLeftCopies = 16

func (s *steward) copiesKey() copiesKey {
	if s.born.IsZero() {
		return copiesKey{nc: s.nc, bucket: s.bucket, key: s.e.key}
	}
	return copiesKey{bucket: s.bucket, key: s.e.key, born: s.born}
}

func (s *steward) name() copyName { return copyName{s.e.identity, s.e.instance} }

// joinCopies adds s to its election's copies in this process.
func (s *steward) joinCopies() {
	localCopies.mu.Lock()
	defer localCopies.mu.Unlock()
	k := s.copiesKey()
	cs := localCopies.m[k]
	if cs == nil {
		cs = &copies{}
		localCopies.m[k] = cs
	}
	cs.running = append(cs.running, s)
	cs.left = slices.DeleteFunc(cs.left, func(n copyName) bool { return n == s.name() })
}

// leaveCopies takes s out of its election's copies; they remember it as
// stopped while any other runs.
func (s *steward) leaveCopies() {
	localCopies.mu.Lock()
	defer localCopies.mu.Unlock()
	k := s.copiesKey()
	cs := localCopies.m[k]
	if cs == nil {
		return
	}
	cs.running = slices.DeleteFunc(cs.running, func(o *steward) bool { return o == s })
	if len(cs.running) == 0 {
		delete(localCopies.m, k)
		return
	}
	if len(cs.left) == maxLeftCopies {
		cs.left = slices.Delete(cs.left, 0, 1)
	}
	cs.left = append(cs.left, s.name())
}

// copyState is a copy of the candidate in this process as it is now; one
// stopped (gone) has its health as it last announced it.
type copyState struct {
	copyName
	gone, leaving, healthy bool
}

// localCopies returns this process's other copies of s as they are now;
// nil when it runs none.
func (s *steward) localCopies() []copyState {
	localCopies.mu.Lock()
	cs := localCopies.m[s.copiesKey()]
	if cs == nil || len(cs.running) < 2 && len(cs.left) == 0 {
		localCopies.mu.Unlock()
		return nil
	}
	var out []copyState
	for _, n := range cs.left {
		out = append(out, copyState{copyName: n, gone: true})
	}
	running := slices.Clone(cs.running)
	localCopies.mu.Unlock()
	for _, o := range running {
		if o != s {
			o.mu.Lock()
			out = append(out, copyState{copyName: o.name(), leaving: o.stopping(), healthy: o.st.healthy})
			o.mu.Unlock()
		}
	}
	return out
}

// correctByCopies corrects roll, which its caller owns, in place, by the
// process's copies as they are now, and returns it: one stopping or
// stopped is leaving; a running one's health is as its last check said.
func correctByCopies(roll []standing.Candidate, copies []copyState) []standing.Candidate {
	for i, c := range roll {
		for _, o := range copies {
			if o.copyName != (copyName{c.Identity, c.Instance}) {
				continue
			}
			if o.gone {
				o.healthy = c.Healthy
			}
			leaving := c.Leaving || o.gone || o.leaving
			if leaving != c.Leaving || o.healthy != c.Healthy {
				roll[i].Leaving, roll[i].Healthy = leaving, o.healthy
			}
		}
	}
	return roll
}
