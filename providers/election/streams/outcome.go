package streams

// outcome is what became of a request, as the driver tells the machine
// (classified): a closed set, so the machine never decides on an error's
// type.
type outcome uint8

const (
	// outDone: the request succeeded.
	outDone outcome = iota
	// outMismatch: a compare-and-swap found another revision (see
	// input.conflict).
	outMismatch
	// outRejected: JetStream answered with an error; nothing was stored.
	outRejected
	// outBucketGone: the bucket or its stream is not there.
	outBucketGone
	// outNoResponders: no JetStream server took the request; nothing was
	// stored.
	outNoResponders
	// outNotSent: the request waited out its time for a turn and was never
	// sent.
	outNotSent
	// outTimeout: no answer in time: the request may have been stored.
	outTimeout
	// outDenied: the broker refused permission; the campaign cannot go on.
	outDenied
	// outClosed: the connection was closed for good.
	outClosed
	// outUnknown: any other failure, such as a connection lost
	// mid-request: the request may have been stored.
	outUnknown
)

// mayHaveApplied reports whether a write that failed so may still have
// been stored: only an answer from JetStream, or the certainty that no
// server received it, rules that out.
func (o outcome) mayHaveApplied() bool {
	switch o {
	case outMismatch, outRejected, outBucketGone, outNoResponders, outNotSent:
		return false
	}
	return true
}

// unanswered reports whether an offer failed for want of an answer,
// rather than by a refusal: its target may have taken the key meanwhile.
func (o outcome) unanswered() bool { return o == outTimeout || o == outNoResponders }

// fatal reports whether the campaign cannot go on after it.
func (o outcome) fatal() bool { return o == outDenied || o == outClosed }

// bucketGone reports whether a read so answered says the bucket is not
// there, so no holder. For an observer (writes false), no JetStream
// answering at all counts too: no holder could renew through it either.
func (o outcome) bucketGone(writes bool) bool {
	return o == outBucketGone || (!writes && o == outNoResponders)
}
