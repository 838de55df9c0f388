package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/internal/denied"
	"github.com/conclave-io/conclave/internal/keymsg"
	"github.com/conclave-io/conclave/providers/election/standing"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// handOverJSON is the JSON output of stand-down --to.
type handOverJSON struct {
	Election string `json:"election"`
	// From is the leader that was asked to hand over.
	From string `json:"from"`
	// FromInstance is its instance, "" when its write did not say.
	FromInstance string `json:"from_instance"`
	// To is the candidate it was asked to hand over to, as --to named it.
	To string `json:"to"`
	// ToIdentity and ToInstance are that candidate's identity and
	// instance; ToInstance is "" when --to named an identity (any of its
	// copies).
	ToIdentity string `json:"to_identity"`
	ToInstance string `json:"to_instance"`
	// MarkerRevision is the revision of the leader's release, null when
	// there was none (the named candidate took up the leader's offer of
	// the key, with one write over the leader's) or it was unseen.
	MarkerRevision *uint64 `json:"marker_revision"`
	// NewLeader is who took the key, null with --no-wait or when nobody did
	// within the wait.
	NewLeader *string `json:"new_leader"`
	// NewInstance is the new leader's instance: null without NewLeader,
	// "" when its write did not say.
	NewInstance *string `json:"new_leader_instance"`
	// Token is the new leader's fencing token (the revision of the write
	// that began its term); null without NewLeader, and when that write was
	// overwritten before stand-down could read it.
	Token *uint64 `json:"token"`
	// HandedOver is true when the named candidate took the key.
	HandedOver bool `json:"handed_over"`
	// Bucket is the bucket, with its TTL.
	Bucket bucketRefJSON `json:"bucket"`
}

// handOver asks the leader of election name to hand over to the candidate
// to, and waits for to (or, if it does not take the key in time, anyone)
// to take the key.
func (e *elections) handOver(ctx context.Context, name, to string, force bool, wait time.Duration, noWait, asJSON bool) error {
	if err := validateElectionName(name); err != nil {
		return err
	}
	if to == "" || strings.TrimSpace(to) != to || strings.ContainsFunc(to, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("--to %q is not a candidate's identity: give the identity a candidate runs as (`conclave election info %s` lists them)", to, name)
	}
	s, rec, err := e.openLed(ctx, "conclave election stand-down --to", name, "hand over")
	if err != nil {
		return err
	}
	defer s.Close()
	if rec.Instance != "" && (rec.Instance == to || named(rec.Leader, rec.Instance) == to) {
		return fmt.Errorf("%s already leads %s: nothing to hand over (name another candidate with --to)", named(rec.Leader, rec.Instance), name)
	}
	rctx, cancel := s.request(ctx)
	stands, err := standing.Standing(rctx, s.nc, s.bucket, name, 0)
	cancel()
	if err != nil {
		return fmt.Errorf("asking who stands in %s: %w", name, err)
	}
	leaderStands := false
	for _, c := range stands {
		leaderStands = leaderStands || c.Identity == rec.Leader
	}
	matches, ask, err := candidatesNamed(to, name, stands)
	if err != nil {
		return err
	}
	var healthy []standing.Candidate
	for _, c := range matches {
		if c.Healthy {
			healthy = append(healthy, c)
		}
	}
	names := standingNames(stands)
	switch {
	case len(matches) == 0 && rec.Leader == to:
		return fmt.Errorf("%s already leads %s: nothing to hand over (no other candidate of that identity stands; name another candidate with --to)", to, name)
	case len(matches) == 0:
		others := "none answers"
		if len(names) > 0 {
			others = "those that answer: " + strings.Join(names, ", ")
		}
		return fmt.Errorf("%s is not standing in %s (%s): name a candidate that stands, as identity, instance or identity/instance, or check its identity with `conclave election info %s`", to, name, others, name)
	case len(healthy) == 0:
		return fmt.Errorf("%s is unhealthy in %s (its health check fails, so it would not lead): a hand-over to it would leave the election without a leader; %s keeps leading. Name a healthy candidate (`conclave election info %s` lists them)", to, name, named(rec.Leader, rec.Instance), name)
	}
	// Name both ends as identity/instance where known, as info does.
	toIdentity, toInstance, toName := healthy[0].Identity, "", to
	if ask != toIdentity { // an instance, or identity/instance
		toInstance = healthy[0].Instance
		toName = named(toIdentity, toInstance)
	}
	leaderName := named(rec.Leader, rec.Instance)
	if !force {
		ok, err := e.confirm(fmt.Sprintf("Really have %s hand %s over to %s? [y/N] ", leaderName, name, toName))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("not confirmed: %s still leads %s (pass --force to skip the question)", leaderName, name)
		}
	}
	st, err := s.status(ctx)
	if err != nil {
		return err
	}

	// Read the key's writes from just after the one read, so that neither
	// the release nor the takeover is missed.
	feed, err := s.keyFeed(ctx, name, rec.Revision+1)
	if err != nil {
		return err
	}
	defer feed.stop()
	rctx, cancel = s.request(ctx)
	before := denied.Last(s.nc)
	subject := standing.HandOverSubject(s.bucket, name)
	stop := s.cancelOnRefusal(cancel, before, subject)
	from, err := standing.RequestHandOver(rctx, s.nc, s.bucket, name, ask)
	stop()
	cancel()
	if err != nil {
		// A user who may not ask for hand-overs is refused at once.
		if why := denied.Explain(s.nc, err, before, "asking the leader of "+name+" to hand over", subject); errors.Is(why, denied.ErrPermissionDenied) {
			return why
		}
	}
	switch {
	case errors.Is(err, standing.ErrNoLeaderAnswered) && leaderStands:
		return fmt.Errorf("%s holds %s but did not take the request to hand over within %v: it does not lead yet (after a forced stand-down or an expiry the new holder waits up to a TTL, %v, before it acts) or has just stopped leading; try again in a moment, `conclave election watch %s` shows when a term begins: %w", rec.Leader, name, s.timeout, st.TTL(), name, err)
	case errors.Is(err, standing.ErrNoLeaderAnswered):
		return fmt.Errorf("%s leads %s but did not answer the request to hand over within %v: it is Choria's candidate or an older Conclave's, which cannot hand over to a named candidate; `conclave election stand-down %s` makes it stand down, and any candidate may then take over: %w", rec.Leader, name, s.timeout, name, err)
	case err != nil:
		return fmt.Errorf("handing %s over to %s: %w", name, to, err)
	}
	if from == "" {
		from = rec.Leader
	}
	fromInstance := rec.Instance
	if from != rec.Leader {
		fromInstance = ""
	}
	fromName := named(from, fromInstance)
	out := handOverJSON{Election: name, From: from, FromInstance: fromInstance, To: to, ToIdentity: toIdentity, ToInstance: toInstance,
		Bucket: bucketRefJSON{Name: s.bucket, TTLSeconds: seconds(st.TTL())}}
	if noWait {
		if asJSON {
			return writeJSON(e.a.stdout, out)
		}
		fmt.Fprintf(e.a.stdout, "%s handed %s over to %s.\n", fromName, name, toName)
		return nil
	}
	if wait <= 0 {
		wait = st.TTL() + waitSlack
	}
	waitUntil := time.Now().Add(wait)
	hw, err := awaitHandOver(ctx, feed.msgs, rec.Revision, from, fromInstance, wait)
	if err == nil && !hw.taken.began {
		// The write the takeover followed was overwritten before the feed
		// read it: the new leader says its token when asked who stands.
		hw.taken.began = e.askToken(ctx, s, name, rec.Revision, &hw.taken)
	}
	if err == nil && hw.taken.began {
		// The write says its term begins; a Conclave leader says which
		// term it leads, and that is the token.
		confirmToken(ctx, s, name, rec.Revision, &hw.taken, waitUntil)
	}
	if hw.marker != 0 {
		out.MarkerRevision = &hw.marker
		if !asJSON {
			fmt.Fprintf(e.a.stdout, "%s released %s at revision %d, handing it over to %s.\n", fromName, name, hw.marker, toName)
		}
	} else if !asJSON {
		fmt.Fprintf(e.a.stdout, "%s handed %s over to %s.\n", fromName, name, toName)
	}
	newName := named(hw.taken.leader, hw.taken.instance)
	if err == nil {
		out.NewLeader, out.NewInstance = &hw.taken.leader, &hw.taken.instance
		out.HandedOver = hw.taken.leader == toIdentity && (toInstance == "" || hw.taken.instance == toInstance)
		if hw.taken.began {
			out.Token = &hw.taken.revision
		}
	}
	switch {
	case ctx.Err() != nil && !asJSON:
		return nil
	case asJSON:
		return writeJSON(e.a.stdout, out)
	case err != nil:
		fmt.Fprintf(e.a.stdout, "Nobody took over %s within %v. `conclave election watch %s` shows when a candidate does.\n", name, wait, name)
	case !hw.taken.began:
		fmt.Fprintf(e.a.stdout, "%s leads %s now, at revision %d; its token is unknown: the write that began its term was overwritten before stand-down read it (the leader logs its token as it begins).\n", newName, name, hw.taken.revision)
	case out.HandedOver:
		fmt.Fprintf(e.a.stdout, "%s leads %s now, token %d.\n", newName, name, *out.Token)
	default:
		fmt.Fprintf(e.a.stdout, "%s did not take %s in time: %s leads it now, token %d, by the election's normal rules.\n", toName, name, newName, *out.Token)
	}
	return nil
}

// bucketOf returns the bucket of a KV subject, $KV.<bucket>.<key>.
func bucketOf(subject string) string {
	rest, _ := strings.CutPrefix(subject, "$KV.")
	bucket, _, _ := strings.Cut(rest, ".")
	return bucket
}

// candidatesNamed returns the candidates of election name, other than the
// leader, that to names, and the name to ask the leader to hand over to
// (the leader matches it as standing.Candidate.NamedBy does). to names a
// candidate as identity/instance, as info lists copies that share an
// identity, or as a bare identity (any of its copies) or a bare instance.
// A to that names candidates in more than one of these ways, or an instance
// that candidates of several identities have, is ambiguous: the error lists
// the candidates it names.
func candidatesNamed(to, name string, cs []standing.Candidate) (matches []standing.Candidate, ask string, err error) {
	var exact, byIdentity, byInstance []standing.Candidate
	for _, c := range cs {
		switch {
		case c.Leader:
		case c.Instance != "" && named(c.Identity, c.Instance) == to:
			exact = append(exact, c)
		case c.Identity == to:
			byIdentity = append(byIdentity, c)
		case c.Instance == to:
			byInstance = append(byInstance, c)
		}
	}
	ways := 0
	for _, m := range [][]standing.Candidate{exact, byIdentity, byInstance} {
		if len(m) > 0 {
			ways++
		}
	}
	all := slices.Concat(exact, byIdentity, byInstance)
	ambiguous := ways > 1
	switch {
	case ambiguous:
	case len(exact) > 0:
		ask = to // identity/instance: that copy
	case len(byInstance) > 0:
		ask = to
		for _, c := range byInstance {
			ambiguous = ambiguous || c.Identity != byInstance[0].Identity
		}
	default:
		ask = to // an identity: any of its copies
	}
	if ambiguous {
		var listed []string
		for _, c := range all {
			listed = append(listed, named(c.Identity, c.Instance))
		}
		return nil, "", fmt.Errorf("--to %s is ambiguous in %s: it names %s: name one candidate as identity/instance (`conclave election info %s` lists them)", to, name, strings.Join(listed, ", "), name)
	}
	return all, ask, nil
}

// standingNames names the candidates that answer as memberNamer does.
func standingNames(cs []standing.Candidate) []string {
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.Identity
	}
	name := memberNamer(ids)
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = name(c.Identity, c.Instance)
	}
	return names
}

// memberNamer names candidates or shard group members, of the identities
// given, as info lists them: by identity, and as identity/instance where
// several share the identity.
func memberNamer(identities []string) func(identity, instance string) string {
	count := map[string]int{}
	for _, id := range identities {
		count[id]++
	}
	return func(identity, instance string) string {
		if count[identity] > 1 {
			return named(identity, instance)
		}
		return identity
	}
}

// confirmToken asks who stands until t's leader answers that it leads a
// term begun after revision read, or until passes, and then takes that
// term's token as t's: a write that says it begins a term may not begin
// one (the taker's answer came back after its lease would have ended; its
// next write then begins the term), and only the leader knows which did.
// It gives up at once when no candidate answers (Choria's do not) or
// another answers that it leads, and keeps t as it is unless the leader
// answers.
func confirmToken(ctx context.Context, s *session, name string, read uint64, t *takeover, until time.Time) {
	for ctx.Err() == nil && time.Now().Before(until) {
		var leads *standing.Candidate
		other := false // another candidate answers that it leads: the key moved on
		rctx, cancel := context.WithDeadline(ctx, until)
		cs, err := standing.StandingUntil(rctx, s.nc, s.bucket, name, confirmWait, func(cs []standing.Candidate) bool {
			for _, c := range cs {
				switch {
				case !c.Leader:
				case c.Identity == t.leader && (t.instance == "" || c.Instance == t.instance) && c.Token > read:
					leads = &c
					return true
				default:
					other = true
					return true
				}
			}
			return false
		})
		cancel()
		switch {
		case leads != nil:
			t.revision = leads.Token
			return
		case other, err != nil, len(cs) == 0:
			return
		}
	}
}

// confirmWait is how long each question of confirmToken collects answers
// when the leader is not among them: its term may begin a moment later.
const confirmWait = 100 * time.Millisecond

// askToken reads the key's latest write straight from the stream for the
// token of the term t's leader leads (every write of a Conclave leader says
// it), and sets t's revision to it when it names a write after read and at
// or before t's: it reports whether it did.
func (e *elections) askToken(ctx context.Context, s *session, name string, read uint64, t *takeover) bool {
	r, ok := s.readRaw(ctx, name)
	if tok := r.Token(); ok && r.Leader == t.leader && tok > read && tok <= t.revision {
		t.revision = tok
		return true
	}
	return false
}

// handOverWrites is what a hand-over wrote to the key: the takeover, and
// the leader's release before it when the named candidate did not take up
// the leader's offer of the key.
type handOverWrites struct {
	marker uint64 // the release's revision, 0 if unseen
	taken  takeover
}

// awaitHandOver reads the key's writes after revision read until one takes
// the key after the hand-over of leader from, or wait passes, or ctx ends.
// Writes of from before its release are its renewals. A takeover began its
// term when its revision check names a write that was not its own: the
// release, or the other writes the feed showed. The feed skips messages
// that a newer one replaced before it read them (the bucket keeps one per
// key); when the write a takeover follows is unseen, whether it began the
// term is unknown.
func awaitHandOver(ctx context.Context, msgs <-chan jetstream.Msg, read uint64, from, fromInstance string, wait time.Duration) (handOverWrites, error) {
	var hw handOverWrites
	timer := time.NewTimer(wait)
	defer timer.Stop()
	from = from + "\x00" + fromInstance
	writer := map[uint64]string{read: from} // revision → who wrote it (identity and instance), "" for a removal
	for {
		select {
		case <-ctx.Done():
			return hw, ctx.Err()
		case <-timer.C:
			return hw, fmt.Errorf("nothing within %v", wait)
		case m := <-msgs:
			md, err := m.Metadata()
			if err != nil || md.Sequence.Stream <= read {
				continue
			}
			rev := md.Sequence.Stream
			if m.Headers().Get(keymsg.OperationHeader) != "" || len(m.Data()) == 0 {
				writer[rev] = ""
				if hw.marker == 0 {
					hw.marker = rev
				}
				continue
			}
			leader := string(m.Data())
			// A Conclave candidate's write says which instance wrote it
			// and its term: its own revision for the write that took the
			// key and began the term, or the running term's token.
			ent := streams.ReadEntry(keymsg.Read(bucketOf(m.Subject()), &jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: rev, Header: m.Headers(), Data: m.Data(), Time: md.Timestamp}))
			token := ent.Token()
			if leader+"\x00"+ent.Instance == from && hw.marker == 0 && token != rev {
				writer[rev] = from // a renewal before the release
				continue
			}
			t := takeover{leader: leader, instance: ent.Instance, revision: rev}
			if token > read && token <= rev {
				t.revision, t.began = token, true
			} else if v := m.Headers().Get(jetstream.ExpectedLastSubjSeqHeader); v != "" {
				if after, err := strconv.ParseUint(v, 10, 64); err == nil {
					if w, seen := writer[after]; seen && w != leader {
						t.began = true
					}
				}
			}
			hw.taken = t
			return hw, nil
		}
	}
}
