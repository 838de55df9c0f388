package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Fence is the fencing resource leaders write to: an HTTP server on loopback
// that accepts a write only if its token is at least the highest token it
// has accepted, and records every write it receives with its verdict.
//
// A write is GET /write?cand=C&token=T&seq=S&checked=M, where M is the
// writer's CLOCK_MONOTONIC when it last found its term valid. The answer is
// 200 "accepted" or 409 "rejected". A write repeated with the same cand and
// seq (a retry) gets the first verdict again and is recorded once.
type Fence struct {
	ln      net.Listener
	srv     *http.Server
	journal *Journal
	served  chan struct{}

	mu      sync.Mutex
	highest uint64
	writes  []WriteRecord
	byKey   map[fenceKey]int
	changed chan struct{} // closed and replaced on every accepted write
}

type fenceKey struct {
	cand string
	seq  uint64
}

// StartFence listens on a free loopback port and records writes to the
// journal at path.
func StartFence(path string) (*Fence, error) {
	j, err := CreateJournal(path)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		j.Close()
		return nil, err
	}
	f := &Fence{ln: ln, journal: j, served: make(chan struct{}), byKey: map[fenceKey]int{}, changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /write", f.serveWrite)
	// Candidates may sit paused (SIGSTOP) for many seconds on an idle
	// connection: keep it open so that their resumed write arrives.
	f.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 10 * time.Minute}
	go func() {
		defer close(f.served)
		_ = f.srv.Serve(ln)
	}()
	return f, nil
}

// URL returns the base URL writers use, such as http://127.0.0.1:41234.
func (f *Fence) URL() string { return "http://" + f.ln.Addr().String() }

// Close stops the server and closes the journal.
func (f *Fence) Close() error {
	err := f.srv.Close()
	<-f.served
	return errors.Join(err, f.journal.Close())
}

func (f *Fence) serveWrite(w http.ResponseWriter, r *http.Request) {
	at := Mono()
	q := r.URL.Query()
	token, err1 := strconv.ParseUint(q.Get("token"), 10, 64)
	seq, err2 := strconv.ParseUint(q.Get("seq"), 10, 64)
	checked, err3 := strconv.ParseInt(q.Get("checked"), 10, 64)
	cand := q.Get("cand")
	if err := errors.Join(err1, err2, err3); err != nil || cand == "" {
		http.Error(w, fmt.Sprintf("bad write %q: %v", r.URL.RawQuery, err), http.StatusBadRequest)
		return
	}
	rec, err := f.write(WriteRecord{At: at, Cand: cand, Token: token, Seq: seq, Checked: checked})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if rec.Verdict == Rejected {
		w.WriteHeader(http.StatusConflict)
	}
	fmt.Fprintln(w, rec.Verdict)
}

// write decides and records one write.
func (f *Fence) write(rec WriteRecord) (WriteRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := fenceKey{rec.Cand, rec.Seq}
	if i, ok := f.byKey[key]; ok {
		return f.writes[i], nil
	}
	rec.Highest = f.highest
	rec.Verdict = Rejected
	if rec.Token >= f.highest {
		rec.Verdict = Accepted
		f.highest = rec.Token
	}
	if err := f.journal.Append(rec); err != nil {
		return rec, err
	}
	f.byKey[key] = len(f.writes)
	f.writes = append(f.writes, rec)
	if rec.Verdict == Accepted {
		close(f.changed)
		f.changed = make(chan struct{})
	}
	return rec, nil
}

// LastAccepted returns the latest accepted write, if any.
func (f *Fence) LastAccepted() (WriteRecord, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.writes) - 1; i >= 0; i-- {
		if f.writes[i].Verdict == Accepted {
			return f.writes[i], true
		}
	}
	return WriteRecord{}, false
}

// AwaitAccepted waits until a write accepted at or after the CLOCK_MONOTONIC
// time since satisfies ok, and returns it; false when ctx ends first.
func (f *Fence) AwaitAccepted(ctx context.Context, since int64, ok func(WriteRecord) bool) (WriteRecord, bool) {
	for {
		f.mu.Lock()
		changed := f.changed
		for i := len(f.writes) - 1; i >= 0 && f.writes[i].At >= since; i-- {
			if w := f.writes[i]; w.Verdict == Accepted && ok(w) {
				f.mu.Unlock()
				return w, true
			}
		}
		f.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return WriteRecord{}, false
		}
	}
}

// Writes returns every write received so far, in order of receipt.
func (f *Fence) Writes() []WriteRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]WriteRecord(nil), f.writes...)
}
