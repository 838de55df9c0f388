package faults

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// What a candidate process records, one JSON object a line, in its own file.
const (
	EvStart        = "start"        // the process started (PID, identity)
	EvWon          = "won"          // OnWon ran
	EvLeading      = "leading"      // OnLeading ran: token, Started, ValidUntil
	EvRenewed      = "renewed"      // the term's ValidUntil moved (a renewal)
	EvLost         = "lost"         // OnLost ran: cause, final ValidUntil
	EvWrite        = "write"        // a write to the fencing resource and its verdict
	EvSelfStop     = "self-stop"    // about to SIGSTOP itself between check and write
	EvDisconnected = "disconnected" // the NATS connection dropped
	EvReconnected  = "reconnected"  // the NATS connection came back
	EvExit         = "exit"         // the process is about to exit cleanly
	EvCampaigns    = "campaigns"    // Count campaign attempts (OnCampaign as candidate) in the second before At

	// The process's member of the shard group beside the elections
	// records its shards' terms by Key, without Cand.
	EvShardLeading = "shard-leading" // OnAssigned ran for Key: token, Started, ValidUntil
	EvShardRenewed = "shard-renewed" // the shard's term's ValidUntil moved
	EvShardLost    = "shard-lost"    // OnRevoked ran for Key: final ValidUntil
)

// CandidateRecord is one line of a candidate process's record file. Times
// are CLOCK_MONOTONIC nanoseconds (see Mono).
type CandidateRecord struct {
	Ev         string `json:"ev"`
	At         int64  `json:"at"`
	Proc       string `json:"proc"`                  // host and incarnation, "h1.2"
	Cand       string `json:"cand,omitempty"`        // process and worker, "h1.2.w0"
	Identity   string `json:"identity,omitempty"`    // the election identity (shared by a host's workers)
	PID        int    `json:"pid,omitempty"`         // for EvStart
	Priority   int    `json:"priority,omitempty"`    // for EvStart: the candidates' streams.WithPriority
	Token      uint64 `json:"token,omitempty"`       // the term's fencing token
	Started    int64  `json:"started,omitempty"`     // Term.Started
	ValidUntil int64  `json:"valid_until,omitempty"` // Term.ValidUntil when recorded
	Cause      string `json:"cause,omitempty"`       // for EvLost
	Seq        uint64 `json:"seq,omitempty"`         // for EvWrite, EvSelfStop
	Checked    int64  `json:"checked,omitempty"`     // when Term.Valid returned true before the write
	Sent       int64  `json:"sent,omitempty"`        // when the write was sent
	Verdict    string `json:"verdict,omitempty"`     // the resource's answer, or "error"
	Count      int    `json:"count,omitempty"`       // for EvCampaigns
	Key        string `json:"key,omitempty"`         // for the EvShard records: the shard's election key
	Detail     string `json:"detail,omitempty"`
}

// Verdicts of the fencing resource.
const (
	Accepted = "accepted"
	Rejected = "rejected"
)

// WriteRecord is one write the fencing resource received, stamped on receipt.
type WriteRecord struct {
	At      int64  `json:"at"` // CLOCK_MONOTONIC on receipt
	Cand    string `json:"cand"`
	Token   uint64 `json:"token"`
	Seq     uint64 `json:"seq"`
	Checked int64  `json:"checked"` // the writer's CLOCK_MONOTONIC when it checked Term.Valid
	Verdict string `json:"verdict"`
	Highest uint64 `json:"highest"` // the highest token accepted before this write
}

// What the harness records of its own actions.
const (
	HvRunStart    = "run-start"    // candidates are about to start
	HvRunStop     = "run-stop"     // the end of the observed period: stopping everything
	HvFaultBegin  = "fault-begin"  // a fault of Kind began (Target names whom)
	HvFaultEnd    = "fault-end"    // it was healed
	HvFaultSkip   = "fault-skip"   // it could not be injected after all (Detail: why)
	HvProcStart   = "proc-start"   // candidate process Target (of Host) started
	HvProcKill    = "proc-kill"    // SIGKILL sent to Target
	HvProcExit    = "proc-exit"    // Target was reaped: dead from here on
	HvProcStop    = "proc-stop"    // Target is stopped (SIGSTOP seen in /proc)
	HvProcCont    = "proc-cont"    // SIGCONT sent to Target
	HvLinkCut     = "link-cut"     // Host's links to every broker pass nothing
	HvLinkHeal    = "link-heal"    // Host's links pass traffic again
	HvLinkDelay   = "link-delay"   // Host's links delay each direction by Detail
	HvBrokerKill  = "broker-kill"  // SIGKILL sent to broker Node
	HvBrokerStart = "broker-start" // broker Node started
	HvBrokerExit  = "broker-exit"  // broker Node was reaped
	HvDown        = "brokers-down" // the brokers cannot serve the election (no quorum)
	HvUp          = "brokers-up"   // they can again: the stream has a leader
	HvStandDown   = "stand-down"   // conclave election stand-down succeeded
	HvHandOver    = "hand-over"    // the leader Detail answered that it released the key to Target (an identity)
	HvProcTerm    = "proc-term"    // SIGTERM sent to Target: a graceful stop
	HvTTL         = "ttl"          // the bucket's TTL (the stream's MaxAge) is now Detail, a Go duration
	HvPurge       = "purge"        // the election key was purged (a KV purge marker)
	HvConsumers   = "consumers"    // the harness holds Detail consumers on the stream ("full": the limit is reached)
	HvNote        = "note"         // something the harness could not do as planned (Detail)
)

// HarnessEvent is one line of the harness's own record.
type HarnessEvent struct {
	Ev     string `json:"ev"`
	At     int64  `json:"at"`
	Kind   string `json:"kind,omitempty"`   // fault kind, for fault events
	Target string `json:"target,omitempty"` // process, host or node
	Host   string `json:"host,omitempty"`
	Node   string `json:"node,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// ErrJournalClosed is returned by Append after Close.
var ErrJournalClosed = errors.New("faults: journal closed")

// Journal appends JSON lines to a file, one write call a record, so that a
// record survives the SIGKILL of its writer once Append returns. It is safe
// for concurrent use.
type Journal struct {
	mu     sync.Mutex
	f      *os.File
	err    error
	closed bool
}

// CreateJournal creates (or truncates) the file at path.
func CreateJournal(path string) (*Journal, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Journal{f: f}, nil
}

// Append writes v as one line. The first error sticks and is returned by
// every later call and by Close.
func (j *Journal) Append(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return ErrJournalClosed
	}
	if j.err == nil {
		_, j.err = j.f.Write(b)
	}
	return j.err
}

// Close closes the file. Later Appends return ErrJournalClosed.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return j.err
	}
	j.closed = true
	if err := j.f.Close(); j.err == nil {
		j.err = err
	}
	return j.err
}

// ReadJournal reads every record of a journal file. A last line without its
// newline (its writer died mid-write) is ignored.
func ReadJournal[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	r := bufio.NewReader(f)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var v T
		if err := json.Unmarshal(line, &v); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, v)
	}
}
