package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/conclave-io/conclave/internal/denied"
	"github.com/conclave-io/conclave/internal/kvwatch"
	"github.com/conclave-io/conclave/providers/election/streams"
)

func (e *elections) watchCommand() *cobra.Command {
	var asJSON, verbose bool
	cmd := &cobra.Command{
		Use:   "watch [NAME|PATTERN]",
		Short: "Print a line for every change of leadership, until interrupted",
		Long: `Follows election NAME, or every election in the bucket (including ones that
appear later), and prints a line per change: a leader elected (with its
fencing token), released (the leader stepped down and marked the key free),
removed (someone else deleted, purged or emptied the key: a forced
stand-down) or expired (it stopped renewing).
With --verbose renewals are printed too. The first line for each election is
its current state; a term that began before the watch has an unknown token.

PATTERN follows the elections matching it, as NATS subjects match (* is any
one token, a final > one or more: app-a.>, *.cron), including ones that
appear later. A user that may not read every election (a broker's
plugin.conclave.user.NAME.campaign and .observe patterns) must pass a name
or pattern it may read.

Expiries are silent in the bucket: they are noticed when the leader's renewal
is overdue, within about a second of the expiry, or as a standby's write
that took the expired key arrives, whichever is first. Runs until
Ctrl-C (SIGINT) or SIGTERM, and then exits with status 0.`,
		Example: `  conclave election watch
  conclave election watch my_app --verbose
  conclave election watch my_app --json
  conclave --config app-a.conf election watch 'app-a.>'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return e.watch(cmd.Context(), name, asJSON, verbose)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per line (fields: "+docsURL("cli.md")+")")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "print renewals too")
	return cmd
}

// watch follows election name, or, when name is "" or a pattern, every
// election matching it.
func (e *elections) watch(ctx context.Context, name string, asJSON, verbose bool) error {
	pattern := ">"
	switch {
	case name == "":
	case isPattern(name), strings.ContainsAny(name, "*>"):
		// A wildcard inside a token ("my*") is a pattern mistyped:
		// checkPattern says how to write it.
		if err := checkPattern(name); err != nil {
			return err
		}
		pattern, name = name, ""
	default:
		if err := validateElectionName(name); err != nil {
			return err
		}
	}
	s, err := e.open(ctx, connectOptions{name: "conclave election watch", longLived: true})
	if err != nil {
		return err
	}
	defer s.Close()
	// What watch says on standard error is JSON lines too with --json,
	// so that 2>&1 stays JSON.
	elog := newEventLog(e.a.stderr, asJSON)
	elog.election = name
	w := &bucketWatch{
		s:       s,
		out:     &watchPrinter{w: e.a.stdout, json: asJSON},
		verbose: verbose,
		log:     stderrLogger{log: elog},
		errs:    make(chan error, 1),
	}
	defer w.wg.Wait()
	w.out.followConnection(s.nc)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if name != "" {
		recs, err := s.readRecords(ctx, name)
		if err != nil {
			return err
		}
		if testHookWatchRead != nil {
			testHookWatchRead()
		}
		// No message: whatever term the watch finds began since it read.
		fresh := len(recs) == 0
		if fresh {
			if note := s.unknownElection(ctx, name); !errors.Is(note, errElectionAppeared) {
				watchStatus(elog, "waiting", "%v; waiting for it to begin (Ctrl-C to stop)", note)
			}
		}
		if err := w.follow(ctx, name, false, 0, fresh); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.errs:
			return err
		}
	}
	return everyElectionRefused(w.all(ctx, pattern, func() {
		what := "every election"
		if pattern != ">" {
			what = "the elections matching " + pattern
		}
		watchStatus(elog, "watching", "watching %s in %s on %s (Ctrl-C to stop)", what, s.bucket, s.url)
	}), pattern, "watch", e.a.who())
}

// testHookWatchRead, when set, runs after watch NAME has read the
// election and before it starts following it: tests make the election
// begin in between.
var testHookWatchRead func()

// watchStatus prints one of watch's own lines on standard error: as
// "conclave: " and the message, or with --json as a JSON object with the
// event (waiting, watching), so that the two streams can be merged.
func watchStatus(log *eventLog, event, format string, args ...any) {
	if log.json {
		log.event(event, nil, format, args...)
		return
	}
	fmt.Fprintf(log.w, "conclave: %s\n", fmt.Sprintf(format, args...))
}

// bucketWatch follows elections with one streams.Observer each.
type bucketWatch struct {
	s       *session
	out     *watchPrinter
	verbose bool
	log     stderrLogger
	errs    chan error
	wg      sync.WaitGroup
}

// all follows every election in the bucket matching pattern, starting an
// observer for each key as it appears; started is called once the broker
// has created the watch.
func (w *bucketWatch) all(ctx context.Context, pattern string, started func()) error {
	keys, stop, err := w.watchKeys(ctx, pattern)
	if err != nil {
		return fmt.Errorf("watching bucket %s on %s: %w", w.s.bucket, w.s.url, err)
	}
	defer stop()
	started()
	seen := map[string]bool{}
	var initial []string
	inInitial := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.errs:
			return err
		case ent, ok := <-keys.Updates():
			if !ok {
				return fmt.Errorf("watching bucket %s on %s: the watch ended", w.s.bucket, w.s.url)
			}
			if ent == nil {
				// The keys there are now: their observers start together
				// (a shared watch takes them in at once), and print their
				// current states in order.
				inInitial = false
				slices.Sort(initial)
				if err := w.followAll(ctx, initial); err != nil {
					return err
				}
				initial = nil
				continue
			}
			if seen[ent.Key()] {
				continue
			}
			seen[ent.Key()] = true
			if inInitial {
				initial = append(initial, ent.Key())
				continue
			}
			if err := w.follow(ctx, ent.Key(), true, ent.Revision(), false); err != nil {
				return err
			}
		}
	}
}

// watchKeys watches the keys matching pattern, their metadata only, until
// stop is called or ctx ends. The broker has --timeout to create the watch
// (the watch itself lasts); when it refuses it for permissions, the error
// matches denied.ErrPermissionDenied, at once.
func (w *bucketWatch) watchKeys(ctx context.Context, pattern string) (keys jetstream.KeyWatcher, stop func(), err error) {
	wctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(w.s.timeout, cancel)
	before := denied.Last(w.s.nc)
	watching := w.s.cancelOnRefusal(cancel, before, w.s.watchSubject(pattern))
	keys, err = w.s.kv.Watch(wctx, pattern, jetstream.MetaOnly())
	watching()
	timedOut := !timer.Stop()
	if timedOut && err == nil {
		// Created, but only as the time ran out, which stopped it.
		kvwatch.Stop(keys)
		err = context.Canceled
	}
	if err != nil {
		cancel()
		if timedOut && ctx.Err() == nil && errors.Is(err, context.Canceled) {
			err = fmt.Errorf("no answer within %v (--timeout): %w", w.s.timeout, context.DeadlineExceeded)
		}
		return nil, nil, w.s.explainWatch(err, before, pattern)
	}
	return keys, func() { kvwatch.Stop(keys); cancel() }, nil
}

// followAll starts an observer of each of keys at once, and lets each print
// the state it found in turn, in the order of keys.
func (w *bucketWatch) followAll(ctx context.Context, keys []string) error {
	watches := make([]*electionWatch, 0, len(keys))
	releaseAll := func() {
		for _, ew := range watches {
			ew.release()
		}
	}
	for _, k := range keys {
		ew, err := w.start(ctx, k, false, 0, false, true)
		if err != nil {
			releaseAll()
			return err
		}
		watches = append(watches, ew)
	}
	for _, ew := range watches {
		if err := w.await(ctx, ew); err != nil {
			releaseAll()
			return err
		}
	}
	return nil
}

// follow starts an observer of election key and waits until it has reported
// the state it found. live means the key appeared while watching the bucket,
// revealed by the write at revision rev; fresh that the key had no message
// when the watch read it.
func (w *bucketWatch) follow(ctx context.Context, key string, live bool, rev uint64, fresh bool) error {
	ew, err := w.start(ctx, key, live, rev, fresh, false)
	if err != nil {
		return err
	}
	return w.await(ctx, ew)
}

// start starts an observer of election key (see follow); held, its first
// report waits to be printed until await lets it.
func (w *bucketWatch) start(ctx context.Context, key string, live bool, rev uint64, fresh, held bool) (*electionWatch, error) {
	ew := &electionWatch{ctx: ctx, key: key, out: w.out, first: true, live: live, liveRev: rev, started: make(chan struct{})}
	if held {
		ew.hold = make(chan struct{})
	}
	if fresh {
		ew.tookEmpty = func(rev uint64) bool { return w.s.tookEmptyKey(ctx, key, rev) }
	}
	opts := []streams.Option{streams.OnChange(ew.onChange), streams.WithLogger(w.log), streams.InBucket(w.s.bucket)}
	if w.verbose {
		opts = append(opts, streams.ObserveRenewals())
	}
	obs, err := streams.NewObserver(key, w.s.js, opts...)
	if err != nil {
		return nil, err
	}
	w.wg.Go(func() {
		if err := obs.Run(ctx); err != nil {
			select {
			case w.errs <- fmt.Errorf("watching election %s: %w", key, err):
			default:
			}
		}
	})
	return ew, nil
}

// await lets ew print the state it found, and waits until it has, for
// --timeout at most: a slow one's lines come when they come.
func (w *bucketWatch) await(ctx context.Context, ew *electionWatch) error {
	ew.release()
	timer := time.NewTimer(w.s.timeout)
	defer timer.Stop()
	select {
	case <-ew.started:
	case <-ctx.Done():
	case err := <-w.errs:
		return err
	case <-timer.C:
		// Slow to start: its lines come when they come.
	}
	return nil
}

// electionWatch turns one observer's reports into lines. Its fields are
// used only by the observer's goroutine, in OnChange.
type electionWatch struct {
	ctx     context.Context // the watch's: a held first report waits no longer
	hold    chan struct{}   // closed once the first report may print; nil: at once
	holdEnd sync.Once
	key     string
	out     *watchPrinter
	first   bool   // the next report is the state the observer found
	live    bool   // the key appeared while watching: its first report is a change
	liveRev uint64 // the revision that revealed it
	// tookEmpty, when the key had no message as the watch read it, says
	// whether the write at a revision took the key from no message, which
	// began a term since.
	tookEmpty func(rev uint64) bool
	started   chan struct{}

	leader    string // the current leader, "" when none
	instance  string // its instance, "" when none or its writes do not say
	token     uint64 // the current term's token, 0 when unknown
	lastEvent streams.Event
}

func (w *electionWatch) onChange(l streams.Leadership) {
	ev := watchEvent{
		at:         time.Now(),
		key:        w.key,
		event:      l.Event,
		state:      l.State.String(),
		leader:     l.Leader,
		instance:   l.Instance,
		previous:   w.leader,
		prevInst:   w.instance,
		handedOver: l.HandedOverBy,
		handedInst: l.HandedOverByInstance,
		releasedBy: l.ReleasedBy,
		releasedIn: l.ReleasedByInstance,
		token:      l.Token,
		revision:   l.Revision,
		written:    l.Renewed,
		expires:    l.ExpiresBy,
	}
	if w.first {
		if w.hold != nil {
			select {
			case <-w.hold:
			case <-w.ctx.Done():
			}
		}
		w.first = false
		defer close(w.started)
		switch {
		case w.tookEmpty != nil && l.Event == streams.EventCurrent && l.HasLeader() && w.tookEmpty(l.Revision):
			// The term began after the watch found no key.
			ev.event, ev.token, ev.previous, ev.prevInst = streams.EventElected, l.Revision, "", ""
		case !w.live:
			ev.event, ev.previous, ev.prevInst = streams.EventCurrent, "", ""
		case l.Event == streams.EventCurrent && l.HasLeader() && l.Revision == w.liveRev:
			// The first write of a key that did not exist is a campaign
			// that won: it began the term.
			ev.event, ev.token = streams.EventElected, l.Revision
		case l.Event == streams.EventCurrent && l.State == streams.KeyReleased:
			ev.event = streams.EventReleased
		case l.Event == streams.EventCurrent && l.State == streams.KeyRemoved:
			ev.event = streams.EventRemoved
		}
	}
	if ev.event == streams.EventRenewed && ev.token == 0 && l.Leader == w.leader && l.Instance == w.instance {
		// The observer did not see the term begin; this watch did (a key
		// that appeared while watching the bucket).
		ev.token = w.token
	}
	if l.HasLeader() {
		w.leader, w.instance, w.token = l.Leader, l.Instance, ev.token
	} else {
		w.leader, w.instance, w.token = "", "", 0
	}
	w.out.print(ev)
}

// release lets the first report print.
func (w *electionWatch) release() {
	if w.hold != nil {
		w.holdEnd.Do(func() { close(w.hold) })
	}
}

// watchEvent is one line of watch's output.
type watchEvent struct {
	at         time.Time
	key        string
	event      streams.Event
	state      string
	leader     string
	instance   string // the leader's instance, "" when its writes do not say
	previous   string
	prevInst   string // the previous leader's instance, when known
	handedOver string // who handed over, when the term began by a hand-over
	handedInst string
	releasedBy string
	releasedIn string // its instance, when known
	token      uint64
	revision   uint64
	written    time.Time
	expires    time.Time
}

// text describes the event for people.
func (ev watchEvent) text() string {
	token := "token unknown"
	if ev.token != 0 {
		token = fmt.Sprintf("token %d", ev.token)
	}
	// Leaders are named identity/instance where their writes say the
	// instance: copies of one identity are told apart, and the name is
	// the one info lists and stand-down --to takes.
	was := "the leader"
	if ev.previous != "" {
		was = named(ev.previous, ev.prevInst)
	}
	leader := named(ev.leader, ev.instance)
	switch ev.event {
	case streams.EventElected:
		if ev.handedOver != "" && ev.token != 0 {
			return fmt.Sprintf("handed over from %s to %s, token %d", named(ev.handedOver, ev.handedInst), leader, ev.token)
		}
		if ev.token == 0 {
			return fmt.Sprintf("%s leads, revision %d (token unknown: the watch restarted after the term began)", leader, ev.revision)
		}
		return fmt.Sprintf("%s leads, token %d", leader, ev.token)
	case streams.EventTaking:
		return fmt.Sprintf("%s took the key, revision %d: its term begins once the previous leader's lease has surely ended", leader, ev.revision)
	case streams.EventRenewed:
		return fmt.Sprintf("%s renewed, revision %d (%s)", leader, ev.revision, token)
	case streams.EventReleased:
		return fmt.Sprintf("released by %s, revision %d: it stepped down; a candidate can lead at once", named(ev.releasedBy, ev.releasedIn), ev.revision)
	case streams.EventRemoved:
		if ev.previous != "" {
			return fmt.Sprintf("key removed while %s led, revision %d: a forced stand-down", was, ev.revision)
		}
		return fmt.Sprintf("key removed, revision %d", ev.revision)
	case streams.EventExpired:
		return fmt.Sprintf("%s stopped renewing: its key expired (last revision %d)", was, ev.revision)
	}
	switch ev.state {
	case streams.KeyHeld.String():
		if ev.token != 0 {
			return fmt.Sprintf("%s leads, revision %d (token %d)", leader, ev.revision, ev.token)
		}
		return fmt.Sprintf("%s leads, revision %d (token unknown: the term began before the watch)", leader, ev.revision)
	case streams.KeyReleased.String():
		return fmt.Sprintf("no leader: released by %s, revision %d", named(ev.releasedBy, ev.releasedIn), ev.revision)
	case streams.KeyRemoved.String():
		return fmt.Sprintf("no leader: removed, revision %d", ev.revision)
	}
	return "no leader: no key"
}

// named is how watch and info name a candidate among copies that share
// its identity: the identity, and its instance after a slash where its
// writes or answers say one.
func named(identity, instance string) string {
	if instance == "" {
		return identity
	}
	return identity + "/" + instance
}

// watchJSON is one line of watch's JSON output.
type watchJSON struct {
	Time           string  `json:"time"`
	Election       string  `json:"election"`
	Event          string  `json:"event"`
	State          string  `json:"state"`
	Leader         string  `json:"leader"`
	Instance       string  `json:"instance"`
	HandedOverBy   string  `json:"handed_over_by"`
	HandedOverFrom string  `json:"handed_over_by_instance"`
	PreviousLeader string  `json:"previous_leader"`
	PreviousInst   string  `json:"previous_leader_instance"`
	ReleasedBy     string  `json:"released_by"`
	ReleasedByInst string  `json:"released_by_instance"`
	Token          *uint64 `json:"token"`
	Revision       uint64  `json:"revision"`
	Written        *string `json:"written"`
	ExpiresAt      *string `json:"expires_at"`
}

func (ev watchEvent) json() watchJSON {
	j := watchJSON{
		Time:           formatJSONTime(ev.at),
		Election:       ev.key,
		Event:          string(ev.event),
		State:          ev.state,
		Leader:         ev.leader,
		Instance:       ev.instance,
		HandedOverBy:   ev.handedOver,
		HandedOverFrom: ev.handedInst,
		ReleasedBy:     ev.releasedBy,
		ReleasedByInst: ev.releasedIn,
		Revision:       ev.revision,
		Written:        jsonTimePtr(ev.written),
		ExpiresAt:      jsonTimePtr(ev.expires),
	}
	switch ev.event {
	case streams.EventReleased, streams.EventRemoved, streams.EventExpired:
		j.PreviousLeader, j.PreviousInst = ev.previous, ev.prevInst
	}
	if ev.token != 0 {
		t := ev.token
		j.Token = &t
	}
	return j
}

// watchPrinter writes watch's lines, one at a time.
type watchPrinter struct {
	mu   sync.Mutex
	w    io.Writer
	json bool
}

func (p *watchPrinter) print(ev watchEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		line, err := json.Marshal(ev.json())
		if err != nil {
			line = []byte(fmt.Sprintf(`{"error":%q}`, err))
		}
		_, _ = p.w.Write(append(line, '\n'))
		return
	}
	fmt.Fprintf(p.w, "%s  %-8s  %s: %s\n", ev.at.Local().Format(textTime), ev.event, ev.key, ev.text())
}

// followConnection prints a line when the connection to the broker is lost
// and when it is back: the observers resume on their own and say nothing
// meanwhile, so without these lines a watch of a broker that went away
// looks like a quiet election.
func (p *watchPrinter) followConnection(nc *nats.Conn) {
	onConnection(nc, p.connection)
}

// onConnection calls report with connDisconnected (the server lost and
// why) when nc loses its connection while not closing, and with
// connReconnected (the server now used) when it is back. report runs on
// nats.go's callback goroutine.
func onConnection(nc *nats.Conn, report func(event, server string, err error)) {
	var mu sync.Mutex
	server := nc.ConnectedUrlRedacted() // the one in use, or last used
	nc.SetDisconnectErrHandler(func(nc *nats.Conn, err error) {
		if nc.IsClosed() {
			return // the command is ending
		}
		mu.Lock()
		lost := server
		mu.Unlock()
		report(connDisconnected, lost, err)
	})
	nc.SetReconnectHandler(func(nc *nats.Conn) {
		mu.Lock()
		server = nc.ConnectedUrlRedacted()
		now := server
		mu.Unlock()
		report(connReconnected, now, nil)
	})
}

// The events of watch's connection lines.
const (
	connDisconnected = "disconnected"
	connReconnected  = "reconnected"
)

// connectionJSON is a connection line of watch's JSON output: it has no
// election, and "event" is disconnected or reconnected.
type connectionJSON struct {
	Time   string `json:"time"`
	Event  string `json:"event"`
	Server string `json:"server"`
	Error  string `json:"error,omitempty"`
}

// connection prints a connection line: event is connDisconnected (with the
// server lost and why) or connReconnected (with the server now used).
func (p *watchPrinter) connection(event, server string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.json {
		j := connectionJSON{Time: formatJSONTime(now), Event: event, Server: server}
		if err != nil {
			j.Error = err.Error()
		}
		line, merr := json.Marshal(j)
		if merr != nil {
			line = []byte(fmt.Sprintf(`{"error":%q}`, merr))
		}
		_, _ = p.w.Write(append(line, '\n'))
		return
	}
	var text string
	switch {
	case event == connReconnected:
		text = fmt.Sprintf("connected to %s: the watch resumes", server)
	case err != nil:
		text = fmt.Sprintf("lost the connection to %s (%v): reconnecting", server, err)
	default:
		text = fmt.Sprintf("lost the connection to %s: reconnecting", server)
	}
	fmt.Fprintf(p.w, "%s  %-8s  %s\n", now.Local().Format(textTime), event, text)
}
