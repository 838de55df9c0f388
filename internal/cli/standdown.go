package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/conclave-io/conclave/internal/denied"
	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// waitSlack is added to the bucket's TTL for stand-down's default wait: a
// new leader may campaign only when its safety net fires, and expiry is late.
const waitSlack = 5 * time.Second

// removeTries bounds how often stand-down retries the removal when the
// leader renews meanwhile.
const removeTries = 5

func (e *elections) standDownCommand() *cobra.Command {
	var force, noWait, asJSON bool
	var wait time.Duration
	var to string
	cmd := &cobra.Command{
		Use:   "stand-down NAME",
		Short: "Force the leader of an election to stand down, and report who takes over",
		Long: `Forces the leader of election NAME to stand down by deleting its key (a delete
marker, as ` + "`choria kv del`" + ` does; not a purge). It asks for confirmation on
standard input unless --force is given.

The leader notices the removal and stands down; candidates take the key at
once but lead only a TTL after the removal, when the old leader has surely
stopped (Choria's own candidates take the key on their next campaign, within
about a TTL); a candidate run by ` + "`conclave election run`" + ` then waits its --grace
before it starts its command. stand-down then waits up to the TTL plus 5s (--wait) for
a candidate to take the key and reports it with its fencing token, the
revision of the write that began its term (or says the token is unknown, when
a renewal overwrote that write before stand-down read it); --no-wait returns
once the key is removed.

It refuses when there is no such election or it has no leader, and removes
the key only if it is still held by the leader it asked about: a renewal in
between is fine, a different leader is not.

With --to ID it asks the leader instead, over NATS, to hand the election over
to candidate ID: the leader releases the key naming ID, which takes it at once;
if ID does not take it within a short window (a quarter TTL, 0.5s to 5s) the
election falls back to its normal rules. stand-down then reports who took the
key and the token of the term that began. Only Conclave's candidates answer
such a request: for Choria's leader, or an older Conclave's, it says so, and a
plain stand-down is the way.`,
		Example: `  conclave election stand-down my_app
  conclave election stand-down my_app --force --no-wait
  conclave election stand-down my_app --force --wait 90 --json
  conclave election stand-down --to node2 --force my_app`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if noWait && cmd.Flags().Changed("wait") {
				return errors.New("--wait and --no-wait contradict each other: pass one of them")
			}
			if cmd.Flags().Changed("to") {
				return e.handOver(cmd.Context(), args[0], to, force, wait, noWait, asJSON)
			}
			return e.standDown(cmd.Context(), args[0], force, wait, noWait, asJSON)
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "do not ask for confirmation")
	durationVar(cmd.Flags(), &wait, "wait", 0, "how long to wait for a new leader (default the bucket's TTL plus 5s)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the key is removed, without waiting for a new leader")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the outcome as one JSON object (election, removed_leader, removed_revision, marker_revision, new_leader, token, bucket)")
	cmd.Flags().StringVar(&to, "to", "", "ask the leader to hand over to this candidate instead of removing its key (JSON: election, from, to, marker_revision, new_leader, token, handed_over, bucket)")
	return cmd
}

// standDownJSON is the JSON output of stand-down.
type standDownJSON struct {
	Election string `json:"election"`
	// RemovedLeader is the leader that was made to stand down.
	RemovedLeader string `json:"removed_leader"`
	// RemovedInstance is its instance, "" when its write did not say.
	RemovedInstance string `json:"removed_leader_instance"`
	// RemovedRevision is the revision of its key that was removed.
	RemovedRevision uint64 `json:"removed_revision"`
	// MarkerRevision is the revision of the delete marker stand-down wrote.
	MarkerRevision uint64 `json:"marker_revision"`
	// NewLeader is who took the key over, null with --no-wait or when
	// nobody did within the wait.
	NewLeader *string `json:"new_leader"`
	// NewInstance is the new leader's instance: null without NewLeader,
	// "" when its write did not say.
	NewInstance *string `json:"new_leader_instance"`
	// Token is the new leader's fencing token: the revision of the write
	// that began its term. Null without NewLeader, and when that write was
	// overwritten by a renewal before stand-down could read it.
	Token *uint64 `json:"token"`
	// Bucket is the bucket, with its TTL: a new leader acts only that
	// long after taking a removed key.
	Bucket bucketRefJSON `json:"bucket"`
}

// openLed connects as command and reads election name, which must have a
// leader to act on (what: "stand down", "hand over"); the caller closes
// the session.
func (e *elections) openLed(ctx context.Context, command, name, what string) (*session, record, error) {
	s, err := e.open(ctx, connectOptions{name: command})
	if err != nil {
		return nil, record{}, err
	}
	rec, err := s.readElection(ctx, name)
	if err == nil && rec.State != streams.KeyHeld {
		err = fmt.Errorf("election %q has no leader to %s: its key is %s (revision %d, %s)", name, what, stateText(rec), rec.Revision, ago(rec.Written, time.Now()))
	}
	if err != nil {
		s.Close()
		return nil, record{}, err
	}
	return s, rec, nil
}

func (e *elections) standDown(ctx context.Context, name string, force bool, wait time.Duration, noWait, asJSON bool) error {
	if err := validateElectionName(name); err != nil {
		return err
	}
	s, rec, err := e.openLed(ctx, "conclave election stand-down", name, "stand down")
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := s.status(ctx)
	if err != nil {
		return err
	}
	removed := named(rec.Leader, rec.Instance)
	if !force {
		ok, err := e.confirm(fmt.Sprintf("Really force %s to stand down from %s? [y/N] ", removed, name))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("not confirmed: %s still leads %s (pass --force to skip the question)", removed, name)
		}
	}

	// Read the key's writes from just after the one read, so that no
	// takeover is missed whenever the consumer starts.
	feed, err := s.keyFeed(ctx, name, rec.Revision+1)
	if err != nil {
		return err
	}
	defer feed.stop()
	marker, err := s.remove(ctx, &rec)
	if err != nil {
		return err
	}
	out := standDownJSON{Election: name, RemovedLeader: rec.Leader, RemovedInstance: rec.Instance, RemovedRevision: rec.Revision, MarkerRevision: marker, Bucket: bucketRefJSON{Name: s.bucket, TTLSeconds: seconds(st.TTL())}}
	if !asJSON {
		fmt.Fprintf(e.a.stdout, "Removed %s at revision %d: %s must stand down.\n", name, marker, removed)
	}
	if noWait {
		if asJSON {
			return writeJSON(e.a.stdout, out)
		}
		return nil
	}
	if wait <= 0 {
		wait = st.TTL() + waitSlack
	}
	taken, err := awaitTakeover(ctx, feed.msgs, marker, wait)
	switch {
	case ctx.Err() != nil && !asJSON:
		return nil
	case asJSON:
		if err == nil {
			out.NewLeader, out.NewInstance = &taken.leader, &taken.instance
			if taken.began {
				out.Token = &taken.revision
			}
		}
		return writeJSON(e.a.stdout, out)
	case err != nil:
		fmt.Fprintf(e.a.stdout, "Nobody took over %s within %v: no other candidate is running, or it campaigns slowly. `conclave election watch %s` shows when one does.\n", name, wait, name)
		return nil
	}
	// The same candidate leads again only if the same instance does: a
	// copy of the removed leader's identity is another candidate.
	again := "now"
	if taken.leader == rec.Leader && taken.instance == rec.Instance {
		again = "again"
	}
	newLeader := named(taken.leader, taken.instance)
	if !taken.began {
		fmt.Fprintf(e.a.stdout, "%s leads %s %s, at revision %d; its token is unknown: the write that began its term was overwritten before stand-down read it (the leader logs its token as it begins).\n",
			newLeader, name, again, taken.revision)
		return nil
	}
	fmt.Fprintf(e.a.stdout, "%s leads %s %s, token %d: a candidate that takes a removed key leads a TTL (%v) after the removal, when %s has surely stopped; `conclave election run` starts its command its --grace after that.\n",
		newLeader, name, again, taken.revision, st.TTL(), removed)
	return nil
}

// keyFeed is the stream of one key's writes, markers included, with their
// headers.
type keyFeed struct {
	msgs <-chan jetstream.Msg
	stop func()
}

// keyFeed reads the writes of election name from revision from on, with an
// ordered consumer: unlike a KV watch, it shows each write's headers.
func (s *session) keyFeed(ctx context.Context, name string, from uint64) (*keyFeed, error) {
	subject := "$KV." + s.bucket + "." + name
	rctx, cancel := s.request(ctx)
	defer cancel()
	before := denied.Last(s.nc)
	cons, err := s.js.OrderedConsumer(rctx, "KV_"+s.bucket, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    from,
	})
	if err != nil {
		return nil, s.explainWatch(fmt.Errorf("watching election %s: %w", name, err), before, name)
	}
	msgs := make(chan jetstream.Msg, 64)
	done := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-done:
		}
	})
	if err != nil {
		return nil, s.explainWatch(fmt.Errorf("watching election %s: %w", name, err), before, name)
	}
	return &keyFeed{msgs: msgs, stop: func() {
		close(done)
		cc.Stop()
		<-cc.Closed()
	}}, nil
}

// takeover is the first write that took a key after its removal.
type takeover struct {
	leader   string
	instance string // the leader's instance, when its write says it
	revision uint64
	// began says whether revision is the write that began the leader's
	// term, its fencing token: false when that write was overwritten
	// before it could be read, and revision is a later renewal.
	began bool
}

// awaitTakeover returns the first write of msgs after revision marker that
// holds the key, or an error when wait passes or ctx ends. Removals after
// marker (the new leader's release, another stand-down) move the marker on.
//
// Whether the write began the term is read from its revision check, the
// Nats-Expected-Last-Subject-Sequence header that every revision-checked
// write carries: a write that follows the marker or an empty key (at most
// marker) is the first after it; a renewal follows a write after it. A
// consumer skips the messages that a newer one replaced before it read
// them (the bucket keeps one per key), so the first write it shows may be
// a renewal.
func awaitTakeover(ctx context.Context, msgs <-chan jetstream.Msg, marker uint64, wait time.Duration) (takeover, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return takeover{}, ctx.Err()
		case <-timer.C:
			return takeover{}, fmt.Errorf("nothing within %v", wait)
		case m := <-msgs:
			md, err := m.Metadata()
			if err != nil || md.Sequence.Stream <= marker {
				continue
			}
			rev := md.Sequence.Stream
			op := m.Headers().Get(keymsg.OperationHeader)
			if op != "" || len(m.Data()) == 0 {
				marker = rev // removed again
				continue
			}
			// A Conclave candidate's write says which instance wrote it.
			ent := streams.ReadEntry(keymsg.Read(bucketOf(m.Subject()), &jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: rev, Header: m.Headers(), Data: m.Data(), Time: md.Timestamp}))
			t := takeover{leader: string(m.Data()), instance: ent.Instance, revision: rev}
			if v := m.Headers().Get(jetstream.ExpectedLastSubjSeqHeader); v != "" {
				if after, err := strconv.ParseUint(v, 10, 64); err == nil && after <= marker {
					t.began = true
				}
			}
			return t, nil
		}
	}
}

// tookEmptyKey reports whether the write at revision rev of election name
// took the key when it had no message: its revision check expected none.
// Such a write began a term, and rev is its token; a renewal expects the
// revision before it. False when it cannot be told within --timeout, as
// when the write was replaced before it could be read.
func (s *session) tookEmptyKey(ctx context.Context, name string, rev uint64) bool {
	feed, err := s.keyFeed(ctx, name, rev)
	if err != nil {
		return false
	}
	defer feed.stop()
	timer := time.NewTimer(s.timeout)
	defer timer.Stop()
	select {
	case m := <-feed.msgs:
		md, err := m.Metadata()
		if err != nil || md.Sequence.Stream != rev || len(m.Data()) == 0 || m.Headers().Get(keymsg.OperationHeader) != "" {
			return false
		}
		return m.Headers().Get(jetstream.ExpectedLastSubjSeqHeader) == "0"
	case <-timer.C:
	case <-ctx.Done():
	}
	return false
}

// confirm asks question on standard error and reads the answer from
// standard input: yes for "y" or "yes" in any case.
func (e *elections) confirm(question string) (bool, error) {
	fmt.Fprint(e.a.stderr, question)
	line, err := bufio.NewReader(e.a.stdin).ReadString('\n')
	switch {
	case !isTerminal(e.a.stdin):
		// Nobody typed the answer: show it, so that the output reads on.
		fmt.Fprintln(e.a.stderr, strings.TrimSpace(line))
	case err != nil:
		// Input ended at the question (Ctrl-D, or a device such as
		// /dev/null): end its line, so that the error starts on its own.
		fmt.Fprintln(e.a.stderr)
	}
	if err != nil && line == "" {
		return false, nil
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

// isTerminal reports whether r is a terminal (not merely a character
// device, as /dev/null is).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// remove deletes the key of rec's election, provided it is still held by
// rec's leader, and returns the delete marker's revision. A renewal in
// between is retried with the new revision. The marker is written as
// kv.Delete writes it, but directly, for its revision.
func (s *session) remove(ctx context.Context, rec *record) (uint64, error) {
	subject := "$KV." + s.bucket + "." + rec.Key
	for try := 1; ; try++ {
		rctx, cancel := s.request(ctx)
		before := denied.Last(s.nc)
		// The broker drops a refused publish without an answer: learn of
		// the refusal from the connection, not from --timeout.
		stop := s.cancelOnRefusal(cancel, before, subject)
		m := nats.NewMsg(subject)
		m.Header.Set(keymsg.OperationHeader, "DEL")
		ack, err := s.js.PublishMsg(rctx, m, jetstream.WithExpectLastSequencePerSubject(rec.Revision))
		stop()
		cancel()
		if err == nil {
			return ack.Sequence, nil
		}
		err = denied.Explain(s.nc, err, before, "standing down election "+rec.Key, subject)
		if !isRevisionMismatch(err) {
			return 0, fmt.Errorf("removing election %s: %w", rec.Key, err)
		}
		cur, rerr := s.readElection(ctx, rec.Key)
		switch {
		case rerr != nil:
			return 0, rerr
		case cur.State != streams.KeyHeld:
			return 0, fmt.Errorf("election %q has no leader any more: its key is %s (revision %d): nothing to stand down", rec.Key, stateText(cur), cur.Revision)
		case !sameHolder(cur, *rec):
			now, was := named(cur.Leader, cur.Instance), named(rec.Leader, rec.Instance)
			return 0, fmt.Errorf("election %q changed hands meanwhile: %s leads now (revision %d), not %s: run stand-down again to stand %s down", rec.Key, now, cur.Revision, was, now)
		case try == removeTries:
			return 0, fmt.Errorf("removing election %s: %s renewed each of %d times in between: try again", rec.Key, rec.Leader, removeTries)
		}
		rec.Revision = cur.Revision // renewed by the same leader: remove that
	}
}

// sameHolder reports whether a and b name one holder: one identity, and
// one instance where both reads tell it (a read straight from the stream
// that failed tells none), so that a copy of the identity is another.
func sameHolder(a, b record) bool {
	return a.Leader == b.Leader && (a.Instance == "" || b.Instance == "" || a.Instance == b.Instance)
}

// isRevisionMismatch reports whether a write failed because the key's
// latest revision was not the expected one.
func isRevisionMismatch(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}
