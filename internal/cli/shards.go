package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/internal/kvwatch"
	"github.com/conclave-io/conclave/internal/shardplan"
	"github.com/conclave-io/conclave/providers/election/streams"
	"github.com/conclave-io/conclave/shards"
)

// Environment variables shards run gives the command.
const (
	envShards      = "CONCLAVE_SHARDS"
	envShardTokens = "CONCLAVE_SHARD_TOKENS"
	envGroup       = "CONCLAVE_GROUP"
)

// shardsSettle is how long shards run lets changes of the held shards
// gather before it restarts the command with the new list: a rebalance
// moves several shards within a few milliseconds.
const shardsSettle = 200 * time.Millisecond

func (a *app) shardsCommand() *cobra.Command {
	e := &elections{a: a}
	cmd := &cobra.Command{
		Use:   "shards",
		Short: "Inspect shard groups, and run a command on a share of a group's shards",
		Long: `A shard group splits a service's work into N shards spread over the copies
that run it, each shard held by one copy at a time. Shard i of group GROUP is
the election GROUP.i in the election bucket, so election list and info show
shards too. Documentation: ` + docsURL("shards.md") + `.`,
		Example: `  conclave shards info ingest
  conclave shards watch ingest
  conclave shards run ingest 64 -- ./worker`,
	}
	asGroup(cmd)
	cmd.PersistentFlags().StringVar(&e.bucket, "bucket", bucket.Name, "the KV bucket holding the shards' elections")
	cmd.AddCommand(e.shardsInfoCommand(), e.shardsWatchCommand(), e.shardsRunCommand())
	return cmd
}

func (e *elections) shardsInfoCommand() *cobra.Command {
	var (
		asJSON bool
		wait   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "info GROUP",
		Short: "Show who holds each shard of a group, with its token and since when, and each member's share",
		Long: `Shows each shard of GROUP (its holder, the fencing token of the holder's term
and when the term began) and each member (how many shards it holds, its
weight and health). Members are asked to announce themselves and heard for
--wait; token and since come from the holders' announcements, the holder
from the bucket.`,
		Example: `  conclave shards info ingest
  conclave shards info ingest --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.shardsInfo(cmd.Context(), args[0], wait, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	durationVar(cmd.Flags(), &wait, "wait", 500*time.Millisecond, "how long to hear the members' announcements")
	return cmd
}

// shardsInfoJSON is the JSON output of shards info.
type shardsInfoJSON struct {
	Group  string        `json:"group"`
	Bucket bucketRefJSON `json:"bucket"`
	// ShardCount is the group's number of shards, as its members know it
	// (or, with no member running, one more than the highest shard key).
	ShardCount int               `json:"shard_count"`
	Held       int               `json:"held"`
	Members    []shardMemberJSON `json:"members"`
	Shards     []shardJSON       `json:"shards"`
}

type shardMemberJSON struct {
	Identity string `json:"identity"`
	// Instance tells apart members under one identity (each run has one).
	Instance string `json:"instance,omitempty"`
	Held     int    `json:"held"`
	Weight   int    `json:"weight"`
	Healthy  bool   `json:"healthy"`
	Leaving  bool   `json:"leaving"`
	Standing int    `json:"standing"`
	Since    string `json:"since"`
}

type shardJSON struct {
	Shard  int    `json:"shard"`
	Key    string `json:"key"`
	State  string `json:"state"`
	Holder string `json:"holder"`
	// HolderInstance is the holding member's instance, when it announced
	// the shard.
	HolderInstance string `json:"holder_instance,omitempty"`
	// Token is the holder's fencing token, when it announced it.
	Token *uint64 `json:"token"`
	// Since is when the holder's term began, when it announced it.
	Since    *string `json:"since"`
	Revision uint64  `json:"revision"`
	Written  *string `json:"written"`
}

// claim is what a member says of a shard it holds.
type claim struct {
	member   string // identity
	instance string
	token    uint64
	since    time.Time
}

func (e *elections) shardsInfo(ctx context.Context, group string, wait time.Duration, asJSON bool) error {
	if err := shards.ValidateGroup(group); err != nil {
		return err
	}
	s, err := e.open(ctx, connectOptions{name: "conclave shards info " + group})
	if err != nil {
		return err
	}
	defer s.Close()
	recs, err := s.readRecords(ctx, group+".*")
	if err != nil {
		return err
	}
	recs = slices.DeleteFunc(recs, func(r record) bool { _, ok := shardOf(group, r.Key); return !ok })
	roll, err := shards.Roll(ctx, s.nc, s.bucket, group, wait)
	if err != nil {
		return err
	}
	if len(recs) == 0 && len(roll) == 0 {
		return fmt.Errorf("no shard group %q in %s: no shard keys (%s.0, %s.1, …) and no member answers; `conclave election list` lists the elections, shard keys among them", group, s.bucket, group, group)
	}
	st, err := s.status(ctx)
	if err != nil {
		return err
	}
	out := shardsView(group, bucketRefJSON{Name: s.bucket, TTLSeconds: seconds(st.TTL())}, recs, roll)
	if asJSON {
		return writeJSON(e.a.stdout, out)
	}
	return writeShardsInfo(e.a.stdout, out, time.Now())
}

// shardsView combines the bucket's shard keys and the members'
// announcements.
func shardsView(group string, b bucketRefJSON, recs []record, roll []shards.Announcement) shardsInfoJSON {
	out := shardsInfoJSON{Group: group, Bucket: b, Members: []shardMemberJSON{}, Shards: []shardJSON{}}
	claims := map[int]claim{}
	for _, a := range roll {
		out.ShardCount = max(out.ShardCount, a.Shards)
		out.Members = append(out.Members, shardMemberJSON{
			Identity: a.Identity, Instance: a.Instance, Held: len(a.Held), Weight: a.Weight, Healthy: a.Healthy,
			Leaving: a.Leaving, Standing: len(a.Standing), Since: formatJSONTime(a.Since),
		})
		for _, h := range a.Held {
			if c, ok := claims[int(h[0])]; !ok || h[1] > c.token {
				claims[int(h[0])] = claim{member: a.Identity, instance: a.Instance, token: h[1], since: time.UnixMilli(int64(h[2]))}
			}
		}
	}
	byShard := map[int]record{}
	for _, r := range recs {
		i, ok := shardOf(group, r.Key)
		if !ok {
			continue
		}
		byShard[i] = r
		out.ShardCount = max(out.ShardCount, i+1)
	}
	for i := range out.ShardCount {
		r, ok := byShard[i]
		sj := shardJSON{Shard: i, Key: shards.Key(group, i), State: streams.KeyAbsent.String()}
		if ok {
			sj.State, sj.Revision, sj.Written = stateText(r), r.Revision, jsonTimePtr(r.Written)
			if r.State == streams.KeyHeld {
				sj.Holder = r.Leader
				out.Held++
			}
		}
		if c, ok := claims[i]; ok && c.member == sj.Holder {
			tok := c.token
			sj.Token, sj.Since, sj.HolderInstance = &tok, jsonTimePtr(c.since), c.instance
		}
		out.Shards = append(out.Shards, sj)
	}
	return out
}

func writeShardsInfo(w io.Writer, v shardsInfoJSON, now time.Time) error {
	var ids []string
	for _, m := range v.Members {
		ids = append(ids, m.Identity)
	}
	name := memberNamer(ids)
	fmt.Fprintf(w, "Group %s: %d shards in bucket %s, %d held, %d members\n\n", v.Group, v.ShardCount, v.Bucket.Name, v.Held, len(v.Members))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tHELD\tWEIGHT\tHEALTH\tSTANDING FOR\tSTARTED")
	for _, m := range v.Members {
		health := "healthy"
		switch {
		case m.Leaving:
			health = "leaving"
		case !m.Healthy:
			health = "unhealthy"
		}
		since, _ := time.Parse(jsonTime, m.Since)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\n", name(m.Identity, m.Instance), m.Held, m.Weight, health, m.Standing, ago(since, now))
	}
	if len(v.Members) == 0 {
		fmt.Fprintln(tw, "(no member answered)\t\t\t\t\t")
	}
	fmt.Fprintln(tw, "\t\t\t\t\t")
	fmt.Fprintln(tw, "SHARD\tKEY\tHOLDER\tTOKEN\tSINCE\t")
	for _, s := range v.Shards {
		holder, token, since := name(s.Holder, s.HolderInstance), "-", "-"
		if holder == "" {
			holder = "(" + s.State + ")"
		}
		if s.Token != nil {
			token = strconv.FormatUint(*s.Token, 10)
		}
		if s.Since != nil {
			t, _ := time.Parse(jsonTime, *s.Since)
			since = ago(t, now)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t\n", s.Shard, s.Key, holder, token, since)
	}
	return tw.Flush()
}

func (e *elections) shardsWatchCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "watch GROUP",
		Short: "Print each change of a shard's holder, and members joining, leaving and changing health",
		Long: `Follows GROUP until interrupted: a line each time a shard changes holder (taken,
released, removed; renewals are not shown, and an expiry is silent until the
next holder takes the key), and each time a member joins, leaves, turns
healthy or unhealthy, or goes silent without leaving (crashed or cut off, as
the members judge it: about a TTL). Members and holders are named
identity/instance, so a hand-over between copies that share an identity is
a line of its own.`,
		Example: `  conclave shards watch ingest
  conclave shards watch ingest --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.shardsWatch(cmd.Context(), args[0], asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per line (time, event, group; shard lines: shard, key, state, holder, holder_instance, token, revision; member lines: member, instance, healthy, held)")
	return cmd
}

func (e *elections) shardsWatch(ctx context.Context, group string, asJSON bool) error {
	if err := shards.ValidateGroup(group); err != nil {
		return err
	}
	s, err := e.open(ctx, connectOptions{name: "conclave shards watch " + group, longLived: true})
	if err != nil {
		return err
	}
	defer s.Close()
	w, err := s.kv.Watch(ctx, group+".*")
	if err != nil {
		return fmt.Errorf("watching group %s in bucket %s: %w", group, s.bucket, err)
	}
	defer kvwatch.Stop(w)
	heard := make(chan *nats.Msg, 1024)
	sub, err := s.nc.ChanSubscribe(shards.Subject(s.bucket, group), heard)
	if err != nil {
		return fmt.Errorf("listening to group %s: %w", group, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = s.nc.Publish(shards.Subject(s.bucket, group), mustJSON(shards.Announcement{Ask: true}))

	silence := shardplan.RollSilence(time.Minute) // until the bucket's TTL is read
	if st, err := s.status(ctx); err == nil {
		silence = shardplan.RollSilence(st.TTL())
	}
	tick := time.NewTicker(silence / 4)
	defer tick.Stop()

	p := &shardPrinter{w: e.a.stdout, json: asJSON, group: group}
	w2 := &shardsWatch{s: s, p: p, group: group, last: map[string]shardHolder{}, members: map[string]heardMember{}, instances: map[string]map[string]bool{}}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ent, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("watching group %s: the watch ended", group)
			}
			if ent == nil {
				p.line("current", map[string]any{}, "watching group %s in bucket %s", group, s.bucket)
				continue
			}
			w2.shardWrite(ctx, streams.ReadEntry(ent))
		case m := <-heard:
			var a shards.Announcement
			if json.Unmarshal(m.Data, &a) != nil || a.Identity == "" {
				continue
			}
			w2.announced(a, time.Now())
		case now := <-tick.C:
			if !s.nc.IsConnected() {
				w2.cutOff = true // the watch hears nobody: that is no member's silence
				continue
			}
			if w2.cutOff {
				w2.cutOff = false
				for name, m := range w2.members {
					m.at = now // heard from anew from the reconnection on
					w2.members[name] = m
				}
			}
			w2.dropSilent(now, silence)
		}
	}
}

// shardsWatch turns a group's key writes and announcements into lines.
// Members are named identity/instance throughout, as info lists them.
type shardsWatch struct {
	s       *session
	p       *shardPrinter
	group   string
	last    map[string]shardHolder // by key: its holder as last printed
	members map[string]heardMember // by member name
	// instances are the instances heard under each identity since the
	// watch began, those that left or went silent included: a shard taken
	// by one copy from another reads as before through the KV API.
	instances map[string]map[string]bool
	cutOff    bool // the watch's connection was down at the last tick
}

// shardHolder is who holds a shard key, as far as a line says.
type shardHolder struct {
	what     string // the entry as Describe says it
	instance string // the holder's instance, "" when its writes do not say
	token    uint64 // the term's token, 0 when unknown
}

type heardMember struct {
	shards.Announcement
	at time.Time
}

// shardWrite prints a line for a write to a shard key that changed its
// holder. The KV watch hides what a write says of itself, so a write that
// reads as before ("held by svc") is read again from the stream where the
// holder's identity has copies in the group: a hand-over between them
// reads the same.
func (w *shardsWatch) shardWrite(ctx context.Context, r record) {
	shard, ok := shardOf(w.group, r.Key)
	if !ok {
		return // an election under the group's name, not one of its shards
	}
	prev, seen := w.last[r.Key]
	h := shardHolder{what: r.Describe()}
	if seen && prev.what == h.what && (r.State != streams.KeyHeld || !w.hasCopies(r.Leader)) {
		return // a renewal
	}
	if r.State == streams.KeyHeld {
		if raw, ok := w.s.readRaw(ctx, r.Key); ok && raw.State == streams.KeyHeld && raw.Leader == r.Leader && raw.Revision >= r.Revision {
			h.instance, h.token = raw.Instance, raw.Token()
		}
		if seen && prev.what == h.what && (h.instance == prev.instance && h.token == prev.token || h.token == 0) {
			return // a renewal, or nothing tells it from one
		}
	}
	w.last[r.Key] = h
	attrs := map[string]any{"shard": shard, "key": r.Key, "state": r.State.String(), "holder": r.Leader, "revision": r.Revision}
	text := h.what
	if r.State == streams.KeyHeld {
		text = "held by " + named(r.Leader, h.instance)
		attrs["holder_instance"] = h.instance
		if h.token != 0 {
			attrs["token"] = h.token
			text += fmt.Sprintf(", token %d", h.token)
		}
	}
	w.p.line("shard", attrs, "shard %d (%s) %s, revision %d", shard, r.Key, text, r.Revision)
}

// hasCopies reports whether more than one member has run under identity
// since the watch began.
func (w *shardsWatch) hasCopies(identity string) bool {
	return len(w.instances[identity]) > 1
}

// announced takes a member's announcement heard at now, and prints a line
// when it joins, leaves or changes health.
func (w *shardsWatch) announced(a shards.Announcement, now time.Time) {
	before, known := w.members[a.Member()]
	w.members[a.Member()] = heardMember{Announcement: a, at: now}
	if w.instances[a.Identity] == nil {
		w.instances[a.Identity] = map[string]bool{}
	}
	w.instances[a.Identity][a.Instance] = true
	who := named(a.Identity, a.Instance)
	attrs := map[string]any{"member": a.Identity, "instance": a.Instance, "healthy": a.Healthy, "held": len(a.Held)}
	switch {
	case a.Leaving && (!known || !before.Leaving):
		w.p.line("left", attrs, "member %s leaves, handing over %d shards", who, len(a.Held))
	case a.Leaving:
	case !known || before.Leaving:
		w.p.line("joined", attrs, "member %s is in the group (weight %d, %s, holding %d)", who, a.Weight, healthWord(a.Healthy), len(a.Held))
	case before.Healthy != a.Healthy:
		w.p.line("health", attrs, "member %s is %s", who, healthWord(a.Healthy))
	}
}

// dropSilent forgets the members not heard from for silence, as the
// members do: one that left is forgotten quietly; one that did not say so
// (crashed, or cut off) is said to be gone.
func (w *shardsWatch) dropSilent(now time.Time, silence time.Duration) {
	for name, m := range w.members {
		if now.Sub(m.at) <= silence {
			continue
		}
		delete(w.members, name)
		if !m.Leaving {
			attrs := map[string]any{"member": m.Identity, "instance": m.Instance, "held": len(m.Held)}
			w.p.line("silent", attrs, "member %s silent for %v: gone without leaving (crashed or cut off), holding %d shards; their keys expire within a TTL",
				named(m.Identity, m.Instance), now.Sub(m.at).Round(time.Second), len(m.Held))
		}
	}
}

// shardOf returns the shard whose key key is in group, ok false when key
// is not a shard key of group (GROUP.i, i written as Key writes it, below
// MaxShards).
func shardOf(group, key string) (shard int, ok bool) {
	suffix, found := strings.CutPrefix(key, group+".")
	i, err := strconv.Atoi(suffix)
	if !found || err != nil || i < 0 || i >= shards.MaxShards || shards.Key(group, i) != key {
		return 0, false
	}
	return i, true
}

func healthWord(ok bool) string {
	if ok {
		return "healthy"
	}
	return "unhealthy"
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// shardPrinter prints watch's lines.
type shardPrinter struct {
	w     io.Writer
	json  bool
	group string
}

func (p *shardPrinter) line(event string, attrs map[string]any, format string, args ...any) {
	now := time.Now()
	if !p.json {
		fmt.Fprintf(p.w, "%s %s\n", now.Format(textTime), fmt.Sprintf(format, args...))
		return
	}
	attrs["time"], attrs["event"], attrs["group"] = formatJSONTime(now), event, p.group
	fmt.Fprintf(p.w, "%s\n", mustJSON(attrs))
}

// shardsRunFlags are shards run's flags.
type shardsRunFlags struct {
	identity string
	grace    time.Duration
	weight   int
	verbose  bool
	json     bool
}

func (e *elections) shardsRunCommand() *cobra.Command {
	var f shardsRunFlags
	cmd := &cobra.Command{
		Use:   "run [flags] GROUP N [--] COMMAND [ARGS...]",
		Short: "Join a shard group of N shards and run a command on the shards held",
		Long: `Joins shard group GROUP of N shards as --identity (else as the framework would:
--config's identity, $CONCLAVE_IDENTITY, else the host name; copies under
one identity, as on one host, are members of their own), and runs COMMAND while it holds at least one shard, with
standard input, output and error passed through and these variables added to
its environment:

  CONCLAVE_SHARDS        the shards held, ascending, comma-separated: 1,5,9
  CONCLAVE_SHARD_TOKENS  each shard's fencing token: 1:812,5:815,9:820
  CONCLAVE_GROUP         the group (GROUP)
  CONCLAVE_IDENTITY      the identity run joins as
  CONCLAVE_BUCKET        the bucket

When the shards held change, the command is restarted: it gets SIGTERM (and
SIGKILL if it still runs --grace later), then starts again with the new list.
A shard is handed to another member only once the command has stopped, so
no two commands ever work on one shard; changes within 200ms are gathered
into one restart. A shard taken any other way (new, expired, removed, or
handed over by a member whose command outlived the shard's lease) may still
be worked on by its earlier holder's command until that gets SIGKILL: the
restart that adds it waits --grace first, so give every member the same
--grace. The command runs in its own process group, and the signals
go to the whole group.

If the command exits on its own, run starts it again after 1s with the same
shards. On Ctrl-C (SIGINT) or SIGTERM, run stops the command, hands each
shard to another member, and exits with status 0.`,
		Example: `  conclave shards run ingest 64 -- ./consume --partitions-from-env
  conclave shards run --identity ingest-a --grace 30s ingest 64 ./worker`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() >= 0 && cmd.ArgsLenAtDash() < 2 {
				return fmt.Errorf("missing GROUP and N before --: %s", shardsRunUsage)
			}
			if len(args) < 3 {
				return fmt.Errorf("missing GROUP, N or COMMAND: %s", shardsRunUsage)
			}
			n, err := strconv.Atoi(args[1])
			if err != nil {
				return fmt.Errorf("N %q is not a number of shards: %s", args[1], shardsRunUsage)
			}
			argv := args[2:]
			if argv[0] == "--" {
				argv = argv[1:]
			}
			if len(argv) == 0 {
				return fmt.Errorf("missing the COMMAND to run: %s", shardsRunUsage)
			}
			return e.shardsRun(cmd.Context(), args[0], n, argv, f)
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().StringVar(&f.identity, "identity", "", "the name to join as, the value of the shard keys held (default: --config's identity, $CONCLAVE_IDENTITY, else the host name)")
	durationVar(cmd.Flags(), &f.grace, "grace", 10*time.Second, "how long the command has to exit after SIGTERM before it gets SIGKILL")
	cmd.Flags().IntVar(&f.weight, "weight", 1, "this member's share relative to the others' weights (1 to 1000)")
	cmd.Flags().BoolVarP(&f.verbose, "verbose", "v", false, "log what the group does")
	cmd.Flags().BoolVar(&f.json, "json", false, "log to standard error as JSON, one object per line")
	return cmd
}

const shardsRunUsage = "usage: conclave shards run [flags] GROUP N [--] COMMAND [ARGS...]"

// shardChange is a change of the held shards, from the group's callbacks to
// the supervisor. A revocation carries done, closed once the command no
// longer runs with the shard.
type shardChange struct {
	shard int
	term  *streams.Term // nil for a revocation
	done  chan struct{}
}

func (e *elections) shardsRun(ctx context.Context, group string, n int, argv []string, f shardsRunFlags) error {
	if f.grace < 0 {
		return fmt.Errorf("--grace %v is negative", f.grace)
	}
	identity, from, err := e.a.identity(f.identity)
	if err != nil {
		return err
	}
	path, err := lookCommand(argv[0])
	if err != nil {
		return err
	}
	log := newEventLog(e.a.stderr, f.json)
	log.identity = identity
	changes := make(chan shardChange)
	quit := make(chan struct{})
	send := func(c shardChange) {
		select {
		case changes <- c:
		case <-quit:
		}
	}
	opts := []shards.Option{
		shards.WithWeight(f.weight),
		shards.OnAssigned(func(s int, t *streams.Term) { send(shardChange{shard: s, term: t}) }),
		shards.OnRevoked(func(s int) {
			done := make(chan struct{})
			send(shardChange{shard: s, done: done})
			select {
			case <-done:
			case <-quit:
			}
		}),
		shards.WithLogger(stderrLogger{log: log, verbose: f.verbose}),
	}
	// Check the arguments before waiting for a broker.
	if err := shards.ValidateGroup(group); err != nil {
		return err
	}
	if n < 1 || n > shards.MaxShards {
		return fmt.Errorf("%w: N %d: a group has 1 to %d shards", shards.ErrInvalidShardCount, n, shards.MaxShards)
	}
	if f.weight < 1 || f.weight > shards.MaxWeight {
		return fmt.Errorf("--weight %d: give 1 to %d", f.weight, shards.MaxWeight)
	}
	s, err := e.open(ctx, connectOptions{name: "conclave shards run " + group, longLived: true, wait: true, log: log, verbose: f.verbose})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer s.Close()
	g, err := shards.NewGroup(identity, group, n, s.js, append(opts, shards.InBucket(s.bucket))...)
	if err != nil {
		return err
	}
	instance := strings.TrimPrefix(g.Member(), identity+"/")
	log.event("joining", map[string]any{"group": group, "shards": n, "instance": instance},
		"%s joining shard group %s of %d shards (identity from %s, instance %s; bucket %s on %s)", identity, group, n, from, instance, s.bucket, s.url)
	gctx, stopGroup := context.WithCancel(context.WithoutCancel(ctx))
	defer stopGroup()
	groupDone := make(chan error, 1)
	go func() { groupDone <- g.Start(gctx) }()

	sv := &shardSupervisor{e: e, group: group, identity: identity, argv: argv, path: path, grace: f.grace, log: log, held: map[int]uint64{}}
	var groupErr error
	stopping := false
	for {
		var exited <-chan int
		if sv.ch != nil {
			exited = sv.ch.exited
		}
		select {
		case <-ctx.Done():
			if !stopping {
				stopping = true
				log.event("interrupted", nil, "interrupted: handing over %d shards of %s", len(sv.held), group)
				stopGroup()
				ctx = context.Background()
			}
		case c := <-changes:
			sv.apply(c)
		case <-sv.restartAt:
			sv.restart()
		case status := <-exited:
			_ = terminateGroup(sv.ch.cmd.Process.Pid)
			sv.ch = nil
			log.event("exited", map[string]any{"status": status}, "%s exited with status %d: starting it again in %v", argv[0], status, restartDelay)
			sv.restartAt = time.After(restartDelay)
		case groupErr = <-groupDone:
			close(quit)
			sv.stop()
			if groupErr != nil {
				return fmt.Errorf("shard group %s: %w", group, groupErr)
			}
			log.event("stopped", map[string]any{"exit_status": 0}, "left shard group %s; exiting with status 0", group)
			return nil
		}
	}
}

// shardSupervisor runs the command with the shards held.
type shardSupervisor struct {
	e         *elections
	group     string
	identity  string
	argv      []string
	path      string
	grace     time.Duration
	log       *eventLog
	held      map[int]uint64 // shard → token
	ch        *child
	restartAt <-chan time.Time
	// startAfter: no start before then, when an earlier holder's command
	// may still work on a shard taken other than by a hand-over.
	startAfter time.Time
}

// apply takes a change: a revocation stops the command at once (the shard
// is handed over only after), a new shard restarts it after the settle, or
// --grace after its term began when it was not handed over (Term.From).
func (sv *shardSupervisor) apply(c shardChange) {
	if c.term != nil {
		sv.held[c.shard] = c.term.Token()
		sv.log.event("assigned", map[string]any{"shard": c.shard, "token": c.term.Token()}, "holding shard %d of %s, token %d", c.shard, sv.group, c.term.Token())
		if wait := graceFor(c.term, sv.grace); wait > 0 {
			if at := time.Now().Add(wait); at.After(sv.startAfter) {
				sv.startAfter = at
			}
			sv.log.event("waiting", map[string]any{"shard": c.shard, "wait_seconds": seconds(wait)}, "shard %d of %s was taken over a key that was %s: its command starts with it in %v (--grace), when an earlier holder's command is surely gone", c.shard, sv.group, c.term.From(), wait)
		}
	} else {
		delete(sv.held, c.shard)
		sv.log.event("revoked", map[string]any{"shard": c.shard}, "no longer holding shard %d of %s", c.shard, sv.group)
		sv.stop()
		close(c.done)
	}
	sv.restartAt = time.After(max(shardsSettle, time.Until(sv.startAfter)))
}

// restart stops the command if it runs and starts it with the shards held,
// if any.
func (sv *shardSupervisor) restart() {
	if wait := time.Until(sv.startAfter); wait > 0 {
		sv.restartAt = time.After(wait)
		return
	}
	sv.restartAt = nil
	sv.stop()
	if len(sv.held) == 0 {
		return
	}
	list, tokens := sv.lists()
	sv.log.event("starting", map[string]any{"shards": list}, "starting %s with shards %s", strings.Join(sv.argv, " "), list)
	ch, err := sv.start(list, tokens)
	if err != nil {
		sv.log.event("error", nil, "%v", err)
		sv.restartAt = time.After(restartDelay)
		return
	}
	sv.ch = ch
}

func (sv *shardSupervisor) lists() (string, string) {
	shardsHeld := make([]int, 0, len(sv.held))
	for s := range sv.held {
		shardsHeld = append(shardsHeld, s)
	}
	slices.Sort(shardsHeld)
	var list, tokens []string
	for _, s := range shardsHeld {
		list = append(list, strconv.Itoa(s))
		tokens = append(tokens, strconv.Itoa(s)+":"+strconv.FormatUint(sv.held[s], 10))
	}
	return strings.Join(list, ","), strings.Join(tokens, ",")
}

func (sv *shardSupervisor) start(list, tokens string) (*child, error) {
	return startChild(sv.e.a, sv.path, sv.argv,
		envShards+"="+list,
		envShardTokens+"="+tokens,
		envGroup+"="+sv.group,
		envIdentity+"="+sv.identity,
		envBucket+"="+sv.e.bucket,
	)
}

// stop stops the command if it runs: SIGTERM, then SIGKILL after the grace.
func (sv *shardSupervisor) stop() {
	if sv.ch == nil {
		return
	}
	ch := sv.ch
	sv.ch = nil
	status := ch.stop(sv.log, sv.grace)
	sv.log.event("stopped", map[string]any{"status": status}, "%s stopped with status %d", sv.argv[0], status)
}
