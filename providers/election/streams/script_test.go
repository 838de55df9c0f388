package streams

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/conclave-io/conclave/providers/election/streams/internal/transport"
)

// TestMachineScripts replays the interaction scripts in testdata/machine:
// each line gives the machine one input, and the lines under it say what
// the machine answered (its action, when it wants to be woken, its notes,
// its phase and mode). Run with -rewrite to regenerate the answers after a
// deliberate change, and read the diff.
//
// Commands:
//
//	new [observer] [identity=a] [ttl=3s] [grace=0s] [keep] [no-offers]
//	<input> [at=1.5s] [args...]
//
// where input is one of start, tick, stop, read, write, release, ttl,
// watch-made, watch-entry, watch-initial-done, watch-ended, handover,
// offer, offered, health, term-lapsed, ask-ttl; at is the time since the
// script began (default: the last input's); and args are
//
//	entry=absent | held:LEADER@REV | released:BY@REV[>TO] | removed@REV
//	err=mismatch[:REV] | rejected | gone | no-responders | not-sent |
//	    timeout | denied | closed | unknown
//	rev=N expect=N sent=DUR ttl=DUR born=DUR to=NAME from=NAME
//	healthy=BOOL marked live then-stop [stop-to=NAME] write=N number=N
//
// then-stop hands a stop with the input (naming the standby stop-to), as
// the driver does with an outcome when Stop was called while its action
// was in flight; write is the number a write's outcome says it carried,
// number the one the entry's message carries (the machine's campaign
// writes carry 1 in scripts).
func TestMachineScripts(t *testing.T) {
	t.Parallel()
	datadriven.Walk(t, filepath.Join("testdata", "machine"), func(t *testing.T, path string) {
		s := &machineScript{t0: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		datadriven.RunTest(t, path, s.run)
	})
}

// machineScript is the state of one script: the machine and the time.
type machineScript struct {
	m   *machine
	t0  time.Time
	now time.Time
}

func (s *machineScript) run(t *testing.T, d *datadriven.TestData) string {
	if d.Cmd == "new" {
		return s.newMachine(t, d)
	}
	if s.m == nil {
		d.Fatalf(t, "%s before new", d.Cmd)
	}
	in := s.input(t, d)
	out := s.m.step(in)
	for _, n := range out.notes {
		if n.kind == noteLog && strings.Contains(n.format, "bug:") {
			d.Fatalf(t, "the machine logged a bug: %s", fmt.Sprintf(n.format, n.args...))
		}
	}
	return s.render(out)
}

func (s *machineScript) newMachine(t *testing.T, d *datadriven.TestData) string {
	e := &Election{opts: defaultOptions()}
	cfg := machineConfig{identity: "a", key: "k", writes: true, releaseOnStop: true, offers: true, timings: e.timings,
		random: func(int64) int64 { return 0 }}
	ttl := 3 * time.Second
	for _, arg := range d.CmdArgs {
		val := ""
		if len(arg.Vals) > 0 {
			val = arg.Vals[0]
		}
		switch arg.Key {
		case "observer":
			cfg = machineConfig{key: "k", timings: observerTimings, random: cfg.random}
		case "identity":
			cfg.identity = val
		case "instance":
			cfg.instance = val
		case "ttl":
			ttl = s.duration(t, d, val)
		case "grace":
			cfg.grace = s.duration(t, d, val)
		case "keep":
			cfg.releaseOnStop = false
		case "no-offers":
			cfg.offers = false
		default:
			d.Fatalf(t, "new: unknown argument %q", arg.Key)
		}
	}
	tm, err := cfg.timings(ttl)
	if err != nil {
		d.Fatalf(t, "new: %v", err)
	}
	s.m, s.now = newMachine(cfg, tm), s.t0
	return fmt.Sprintf("ttl %v, renew every %v, retry %v, margin %v, request timeout %v", tm.ttl, tm.renew, tm.retry, tm.margin, tm.request)
}

var scriptInputs = map[string]inputKind{
	"start": inStart, "tick": inTick, "stop": inStop, "read": inRead, "write": inWrite,
	"release": inRelease, "ttl": inTTL, "watch-made": inWatchMade, "watch-entry": inWatchEntry,
	"watch-initial-done": inWatchInitialDone, "watch-ended": inWatchEnded, "handover": inHandOver,
	"offer": inOffer, "offered": inOffered, "health": inHealth, "term-lapsed": inTermLapsed, "ask-ttl": inAskTTL,
}

// input builds the input a script line gives, its error classified as a
// driver would.
func (s *machineScript) input(t *testing.T, d *datadriven.TestData) input {
	kind, ok := scriptInputs[d.Cmd]
	if !ok {
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	in := input{kind: kind}
	sent := time.Duration(-1)
	var number uint64
	var stopTo string
	for _, arg := range d.CmdArgs {
		val := ""
		if len(arg.Vals) > 0 {
			val = arg.Vals[0]
		}
		switch arg.Key {
		case "at":
			s.now = s.t0.Add(s.duration(t, d, val))
		case "sent":
			sent = s.duration(t, d, val)
		case "entry":
			in.entry = s.entry(t, d, val)
		case "err":
			in.err = scriptError(t, d, val)
		case "rev":
			in.rev = s.number(t, d, val)
		case "expect":
			in.expect = s.number(t, d, val)
		case "ttl":
			in.ttl = s.duration(t, d, val)
		case "born":
			in.born = s.t0.Add(s.duration(t, d, val))
		case "to":
			in.handOver.to, in.handOver.instance, _ = strings.Cut(val, "/")
		case "from":
			in.from = val
		case "healthy":
			if val != "true" {
				in.unhealthy = errCheckFails
			}
		case "marked":
			in.marked = true
		case "live":
			in.live = true
		case "restartable":
			in.restartable = true
		case "then-stop":
			in.stop = &input{kind: inStop}
		case "stop-to":
			stopTo = val
		case "write":
			in.write = s.number(t, d, val)
		case "number":
			number = s.number(t, d, val)
		default:
			d.Fatalf(t, "%s: unknown argument %q", d.Cmd, arg.Key)
		}
	}
	if stopTo != "" {
		if in.stop == nil {
			d.Fatalf(t, "%s: stop-to without then-stop", d.Cmd)
		}
		in.stop.handOver.to = stopTo
	}
	if number != 0 {
		if in.entry == nil {
			d.Fatalf(t, "%s: number without an entry", d.Cmd)
		}
		in.entry.write = number
	}
	in.now = s.now
	if sent >= 0 {
		in.sent = s.t0.Add(sent)
	} else if kind == inRead || kind == inWrite || kind == inRelease || kind == inTTL || kind == inWatchMade || kind == inOffer {
		in.sent = s.now
	}
	if in.entry != nil && in.entry.Written.IsZero() {
		in.entry.Written = s.now
	}
	return classified(in)
}

// entry reads absent, held:LEADER[/INSTANCE]@REV,
// released:BY@REV[>TO[/INSTANCE]] or removed@REV.
func (s *machineScript) entry(t *testing.T, d *datadriven.TestData, val string) *Entry {
	if val == "absent" {
		return nil
	}
	what, revText, ok := strings.Cut(val, "@")
	if !ok {
		d.Fatalf(t, "entry %q: want absent, held:LEADER[/INSTANCE]@REV, released:BY@REV[>TO[/INSTANCE]] or removed@REV", val)
	}
	revText, to, named := strings.Cut(revText, ">")
	e := &Entry{Key: "k", Revision: s.number(t, d, revText)}
	state, who, _ := strings.Cut(what, ":")
	switch state {
	case "held":
		e.State, e.Operation = KeyHeld, jetstream.KeyValuePut
		e.Leader, e.Instance, _ = strings.Cut(who, "/")
	case "released":
		e.State, e.ReleasedBy, e.Operation = KeyReleased, who, jetstream.KeyValueDelete
		if named {
			e.HandOverWithin = s.m.handOverWindow()
			e.HandOverTo, e.HandOverInstance, _ = strings.Cut(to, "/")
		}
	case "removed":
		e.State, e.Operation = KeyRemoved, jetstream.KeyValuePurge
	default:
		d.Fatalf(t, "entry %q: unknown state %q", val, state)
	}
	return e
}

// scriptError returns an error the transport would give for each outcome.
func scriptError(t *testing.T, d *datadriven.TestData, val string) error {
	name, rev, _ := strings.Cut(val, ":")
	switch name {
	case "mismatch":
		if rev == "" {
			return jetstream.ErrKeyExists
		}
		return &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence: " + rev}
	case "rejected":
		return &jetstream.APIError{Code: 500, ErrorCode: 10077, Description: "refused"}
	case "gone":
		return jetstream.ErrStreamNotFound
	case "no-responders":
		return nats.ErrNoResponders
	case "not-sent":
		return fmt.Errorf("%w", transport.ErrNotSent)
	case "timeout":
		return nats.ErrTimeout
	case "denied":
		return fmt.Errorf("%w", ErrPermissionDenied)
	case "closed":
		return nats.ErrConnectionClosed
	case "unknown":
		return fmt.Errorf("connection reset")
	}
	d.Fatalf(t, "err %q: unknown outcome", val)
	return nil
}

func (s *machineScript) duration(t *testing.T, d *datadriven.TestData, val string) time.Duration {
	v, err := time.ParseDuration(val)
	if err != nil {
		d.Fatalf(t, "%q: %v", val, err)
	}
	return v
}

func (s *machineScript) number(t *testing.T, d *datadriven.TestData, val string) uint64 {
	v, err := strconv.ParseUint(val, 10, 64)
	if err != nil {
		d.Fatalf(t, "%q: %v", val, err)
	}
	return v
}

// since renders an instant as the time since the script began.
func (s *machineScript) since(at time.Time) string {
	if at.IsZero() {
		return "never"
	}
	return at.Sub(s.t0).String()
}

// render says what the machine answered, one fact per line.
func (s *machineScript) render(out output) string {
	var b strings.Builder
	a := out.do
	switch a.kind {
	case doNothing:
		fmt.Fprintf(&b, "wake at %s\n", s.since(out.wake))
	case doRead:
		b.WriteString("do read\n")
	case doWrite:
		what := "take"
		if a.renewal {
			what = "renew"
		}
		fmt.Fprintf(&b, "do write (%s) over %d, term %s\n", what, a.expect, a.term.header())
	case doRelease:
		fmt.Fprintf(&b, "do release of %d", a.expect)
		if a.marked {
			b.WriteString(", marked")
		}
		if a.handOver.to != "" {
			fmt.Fprintf(&b, ", naming %s", a.handOver.who())
		}
		b.WriteString("\n")
	case doReadTTL:
		b.WriteString("do read the bucket's TTL\n")
	case doWatch:
		b.WriteString("do watch\n")
	case doOffer:
		fmt.Fprintf(&b, "do offer %d to %s\n", a.expect, a.handOver.who())
	}
	var notes []string
	for _, n := range out.notes {
		switch n.kind {
		case noteBegan:
			notes = append(notes, fmt.Sprintf("began term %d until %s", n.token, s.since(n.until)))
		case noteExtended:
			notes = append(notes, "extended until "+s.since(n.until))
		case noteLimited:
			notes = append(notes, "limited until "+s.since(n.until))
		case noteEnded:
			notes = append(notes, "ended: "+n.cause.String())
		case noteStopWatch:
			notes = append(notes, "stop the watch")
		case noteRestartWatch:
			notes = append(notes, "restart the watch")
		case noteHandOver:
			notes = append(notes, "hand-over: "+errText(n.err))
		case noteTakeOver:
			notes = append(notes, "take-over: "+errText(n.err))
		case noteFailed:
			notes = append(notes, "failed (Start returns it): "+errText(n.err))
		case noteLog:
			if n.level >= levelWarn {
				notes = append(notes, "logged: "+fmt.Sprintf(n.format, n.args...))
			}
		}
	}
	for _, n := range notes {
		b.WriteString(n + "\n")
	}
	if out.done {
		b.WriteString("done\n")
	}
	fmt.Fprintf(&b, "%s, %s", s.m.phase, s.m.mode)
	if s.m.termRuns() {
		fmt.Fprintf(&b, ", term %d", s.m.term)
	}
	return b.String()
}

func errText(err error) string {
	if err == nil {
		return "done"
	}
	return err.Error()
}
