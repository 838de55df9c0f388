// Package keymsg reads a message of an election bucket's stream as a KV
// entry, with what its writer said of itself in its headers (its instance,
// its term), which nats.go's KV API does not show. The election's
// transport reads every message it gets raw so, and this module's tools
// read the keys they fetch raw (with jetstream.Stream.GetLastMsgForSubject,
// or a consumer) the same way. It is no API of the library's: programs
// follow elections with an Observer.
package keymsg

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stamp is what a Conclave candidate's write says of itself in headers,
// which Choria's candidates and the KV API ignore: the candidate instance
// that wrote it (InstanceHeader), and the term it belongs to (TermHeader):
// a running term's token, TermBegins for a write that takes the key and
// begins a term as it lands, or TermWaits for a hold whose term has not
// begun; and, on a write that takes the key, a number drawn at random for
// that write alone (WriteHeader), by which its writer knows it as its own
// when the broker's answer was lost; and, on a release that hands the
// election over to one copy of an identity, that copy's instance
// (HandOverInstanceHeader). Empty fields are not sent.
type Stamp struct {
	Instance         string
	Term             string
	Write            string
	HandOverInstance string
}

// The headers of a Stamp, and the values TermHeader takes besides a token.
const (
	InstanceHeader = "Conclave-Instance"
	TermHeader     = "Conclave-Term"
	WriteHeader    = "Conclave-Write"
	// HandOverInstanceHeader names the instance of the candidate a release
	// hands over to, which its payload names by identity alone.
	HandOverInstanceHeader = "Conclave-Hand-Over-Instance"
	TermBegins             = "begins"
	TermWaits              = "waits"
)

// RandomInstance returns an instance name drawn at random, eight hex
// digits: what a candidate that names none is called (see
// streams.WithInstance).
func RandomInstance() string { return fmt.Sprintf("%08x", rand.Uint32()) }

// OperationHeader is the header NATS KV marks deletes and purges with.
const OperationHeader = "KV-Operation"

// Set writes st into hdr.
func (st Stamp) Set(hdr nats.Header) {
	if st.Instance != "" {
		hdr.Set(InstanceHeader, st.Instance)
	}
	if st.Term != "" {
		hdr.Set(TermHeader, st.Term)
	}
	if st.Write != "" {
		hdr.Set(WriteHeader, st.Write)
	}
	if st.HandOverInstance != "" {
		hdr.Set(HandOverInstanceHeader, st.HandOverInstance)
	}
}

// stampOf reads the stamp of a message's headers.
func stampOf(hdr nats.Header) Stamp {
	if hdr == nil {
		return Stamp{}
	}
	return Stamp{Instance: hdr.Get(InstanceHeader), Term: hdr.Get(TermHeader), Write: hdr.Get(WriteHeader),
		HandOverInstance: hdr.Get(HandOverInstanceHeader)}
}

// Read returns msg, a message of bucket's stream, as a KV entry that
// carries its writer's stamp; nil for a nil msg.
func Read(bucket string, msg *jetstream.RawStreamMsg) jetstream.KeyValueEntry {
	if msg == nil {
		return nil
	}
	key := strings.TrimPrefix(msg.Subject, "$KV."+bucket+".")
	return EntryOf(bucket, key, msg.Data, msg.Header, msg.Sequence, msg.Time)
}

// EntryOf reads a message of the bucket's stream as a KV entry: deletes and
// purges by their KV header, and the server's markers by their reason.
func EntryOf(bucket, key string, data []byte, hdr nats.Header, seq uint64, at time.Time) *Entry {
	ent := &Entry{bucket: bucket, key: key, value: data, revision: seq, created: at, msgTTL: msgTTLOf(hdr), stamp: stampOf(hdr)}
	switch hdr.Get(OperationHeader) {
	case "DEL":
		ent.op = jetstream.KeyValueDelete
	case "PURGE":
		ent.op = jetstream.KeyValuePurge
	default:
		switch hdr.Get(jetstream.MarkerReasonHeader) {
		case "MaxAge", "Purge":
			ent.op = jetstream.KeyValuePurge
		case "Remove":
			ent.op = jetstream.KeyValueDelete
		}
	}
	return ent
}

// msgTTLOf reads a message's own TTL from its Nats-TTL header as the
// server does (a duration, or whole seconds), in whole seconds; 0 for none,
// for "never" and for anything the server would not take.
func msgTTLOf(hdr nats.Header) time.Duration {
	v := hdr.Get(jetstream.MsgTTLHeader)
	if v == "" {
		return 0
	}
	if d, err := time.ParseDuration(v); err == nil {
		return max(d.Truncate(time.Second), 0)
	}
	if n, err := strconv.ParseUint(v, 10, 31); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 0
}

// Entry is a key's message read straight from the stream: a
// jetstream.KeyValueEntry whose Delta is always 0, and which also tells
// the message's own TTL (MsgTTL) and its writer's stamp (Stamp).
type Entry struct {
	bucket, key string
	value       []byte
	revision    uint64
	created     time.Time
	op          jetstream.KeyValueOp
	msgTTL      time.Duration
	stamp       Stamp
}

// NewEntry returns the message of key in bucket at revision, stored at
// created, with value and operation op, and its own TTL msgTTL (0 for
// none).
func NewEntry(bucket, key string, value []byte, revision uint64, created time.Time, op jetstream.KeyValueOp, msgTTL time.Duration) *Entry {
	return &Entry{bucket: bucket, key: key, value: value, revision: revision, created: created, op: op, msgTTL: msgTTL}
}

// MsgTTL is the message's own TTL (its Nats-TTL header, as the election
// writes where the bucket allows it), in whole seconds; 0 when it has none.
// The broker expires the message at the earlier of that and the bucket's
// MaxAge.
func (e *Entry) MsgTTL() time.Duration { return e.msgTTL }

// Stamp is what the message's writer said of itself; empty for writers
// that say nothing, such as Choria's candidates.
func (e *Entry) Stamp() Stamp { return e.stamp }

// WithStamp returns e carrying st: for stores that keep stamps their own way.
func (e *Entry) WithStamp(st Stamp) *Entry {
	c := *e
	c.stamp = st
	return &c
}

func (e *Entry) Bucket() string                  { return e.bucket }
func (e *Entry) Key() string                     { return e.key }
func (e *Entry) Value() []byte                   { return e.value }
func (e *Entry) Revision() uint64                { return e.revision }
func (e *Entry) Created() time.Time              { return e.created }
func (e *Entry) Delta() uint64                   { return 0 }
func (e *Entry) Operation() jetstream.KeyValueOp { return e.op }
