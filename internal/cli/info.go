package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/conclave-io/conclave/broker"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/bucket/fit"
	"github.com/conclave-io/conclave/providers/election/standing"
	"github.com/conclave-io/conclave/providers/election/streams"
)

func (e *elections) infoCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "info [NAME]",
		Short: "Show one election in detail, the bucket's settings, and warnings about them",
		Long: `Shows election NAME (its leader, latest revision, last write and expiry) and
the bucket's settings: TTL, replicas, history, storage, limit markers,
per-key TTL, maximum value size, and the consumers (watches) in use against
the most the server accepts. Without NAME it shows only the bucket.

The consumer limit is the stream's own, or the account's when that is lower;
when neither sets one, nats-server's default of 1000 applies unless the
server's jetstream { limits { default_max_consumers } } says otherwise, which
a client cannot read: the limit is then shown as assumed.

It warns when the bucket is set up in a way that breaks elections: history
above 1, no TTL or one below 1s or above 1h, limit markers on, memory storage,
one replica on a cluster, or consumers within 10% of the limit. The exit
status is 0 even with warnings; with --json they are in "warnings".`,
		Example: `  conclave election info
  conclave election info my_app
  conclave --bucket OTHER election info --json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return e.info(cmd.Context(), name, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts (fields: "+docsURL("cli.md")+")")
	return cmd
}

// bucketJSON is the bucket part of info's JSON output.
type bucketJSON struct {
	Name                  string  `json:"name"`
	TTLSeconds            float64 `json:"ttl_seconds"`
	Replicas              int     `json:"replicas"`
	History               int64   `json:"history"`
	Storage               string  `json:"storage"`
	LimitMarkers          bool    `json:"limit_markers"`
	LimitMarkerTTLSeconds float64 `json:"limit_marker_ttl_seconds"`
	PerKeyTTL             bool    `json:"per_key_ttl"`
	MaxValueSize          int32   `json:"max_value_size"`
	Cluster               string  `json:"cluster"`
	Values                uint64  `json:"values"`
	Consumers             int     `json:"consumers"`
	MaxConsumers          int     `json:"max_consumers"`
	MaxConsumersSource    string  `json:"max_consumers_source"`
	MaxConsumersAssumed   bool    `json:"max_consumers_assumed"`
}

// infoJSON is the JSON output of info.
type infoJSON struct {
	// Elections holds election NAME, as list's elections do; [] without
	// NAME.
	Elections []electionJSON `json:"elections"`
	// Candidates are those that answered who is standing in election
	// NAME, best priority first; [] when none did, null without NAME.
	Candidates []candidateJSON `json:"candidates"`
	Bucket     bucketJSON      `json:"bucket"`
	Warnings   []string        `json:"warnings"`
}

// candidateJSON is one candidate standing, in info's JSON output.
type candidateJSON struct {
	Identity string `json:"identity"`
	Instance string `json:"instance,omitempty"`
	Priority int    `json:"priority"`
	Healthy  bool   `json:"healthy"`
	Leading  bool   `json:"leading"`
	Since    string `json:"since"` // RFC 3339, UTC, milliseconds
}

func (e *elections) info(ctx context.Context, name string, asJSON bool) error {
	if name != "" {
		if err := validateElectionName(name); err != nil {
			return err
		}
	}
	s, err := e.open(ctx, connectOptions{name: "conclave election info"})
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := s.status(ctx)
	if err != nil {
		return err
	}
	var rec *record
	if name != "" {
		r, err := s.readElection(ctx, name)
		if err != nil {
			return err
		}
		rec = &r
	}
	var stands []standing.Candidate
	if name != "" {
		// Only Conclave's candidates answer (not Choria's, nor older
		// Conclave's), within the wait: the list may be incomplete.
		rctx, cancel := s.request(ctx)
		stands, err = standing.Standing(rctx, s.nc, s.bucket, name, 0)
		cancel()
		if err != nil {
			return fmt.Errorf("asking who stands in %s: %w", name, err)
		}
	}
	cfg := st.StreamInfo().Config
	use := consumerUse{In: st.StreamInfo().State.Consumers, Limit: broker.EffectiveConsumerLimit(cfg, s.accountInfo(ctx), 0)}
	cluster := ""
	ci := st.StreamInfo().Cluster
	if ci != nil {
		cluster = ci.Name
	}
	clustered := s.nc.ConnectedClusterName() != "" && len(s.nc.Servers()) > 1
	warnings := bucketWarnings(s.bucket, cfg, clustered)
	health := replicaHealth(ci, cfg.Replicas)
	warnings = append(warnings, health.warnings...)
	if w := use.warning(s.bucket); w != "" {
		warnings = append(warnings, w)
	}
	now := time.Now()

	if asJSON {
		out := infoJSON{
			Bucket: bucketJSON{
				Name:                  s.bucket,
				TTLSeconds:            seconds(cfg.MaxAge),
				Replicas:              cfg.Replicas,
				History:               cfg.MaxMsgsPerSubject,
				Storage:               strings.ToLower(cfg.Storage.String()),
				LimitMarkers:          cfg.SubjectDeleteMarkerTTL > 0,
				LimitMarkerTTLSeconds: seconds(cfg.SubjectDeleteMarkerTTL),
				PerKeyTTL:             cfg.AllowMsgTTL,
				MaxValueSize:          cfg.MaxMsgSize,
				Cluster:               cluster,
				Values:                st.Values(),
				Consumers:             use.In,
				MaxConsumers:          use.Limit.Max,
				MaxConsumersSource:    string(use.Limit.Source),
				MaxConsumersAssumed:   use.Limit.Assumed,
			},
			Elections: []electionJSON{},
			Warnings:  warnings,
		}
		if out.Warnings == nil {
			out.Warnings = []string{}
		}
		if rec != nil {
			out.Elections = append(out.Elections, newElectionJSON(*rec, cfg.MaxAge, now))
			out.Candidates = []candidateJSON{}
			for _, c := range stands {
				out.Candidates = append(out.Candidates, candidateJSON{Identity: c.Identity, Instance: c.Instance, Priority: c.Priority, Healthy: c.Healthy, Leading: c.Leader, Since: formatJSONTime(c.Since)})
			}
		}
		return writeJSON(e.a.stdout, out)
	}
	if health.summary != "" {
		cluster += "; " + health.summary
	}
	return writeInfo(e.a.stdout, s.bucket, rec, stands, cfg, cluster, st.Values(), use, warnings, now)
}

// shared reports whether more than one candidate of identity answers.
func shared(cs []standing.Candidate, identity string) bool {
	n := 0
	for _, c := range cs {
		if c.Identity == identity {
			n++
		}
	}
	return n > 1
}

func writeInfo(w io.Writer, bucket string, rec *record, stands []standing.Candidate, cfg jetstream.StreamConfig, cluster string, values uint64, use consumerUse, warnings []string, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	if rec != nil {
		fmt.Fprintf(tw, "Election:\t%s\n", rec.Key)
		switch rec.State {
		case streams.KeyHeld:
			leader := rec.Leader
			if shared(stands, rec.Leader) {
				leader = named(rec.Leader, rec.Instance)
			}
			if tok := rec.Token(); tok != 0 {
				fmt.Fprintf(tw, "Leader:\t%s, token %d\n", leader, tok)
			} else {
				fmt.Fprintf(tw, "Leader:\t%s\n", leader)
			}
		case streams.KeyReleased:
			fmt.Fprintf(tw, "Leader:\tnone: released by %s (it stepped down; a candidate can lead at once)\n", named(rec.ReleasedBy, rec.Instance))
		case streams.KeyRemoved:
			fmt.Fprintf(tw, "Leader:\tnone: %s by someone other than the leader (a forced stand-down: the next leader waits a TTL before it acts)\n", rec.Describe())
		}
		fmt.Fprintf(tw, "Revision:\t%d (the latest write; the fencing token only if it began the term)\n", rec.Revision)
		fmt.Fprintf(tw, "Last write:\t%s (%s)\n", rec.Written.Local().Format(textTime), ago(rec.Written, now))
		if rec.State == streams.KeyHeld && cfg.MaxAge > 0 {
			exp := rec.Written.Add(cfg.MaxAge)
			fmt.Fprintf(tw, "Expires:\t%s (%s) unless renewed\n", exp.Local().Format(textTime), until(exp, now))
		}
		fmt.Fprintf(tw, "Candidates that answer:\t%d (Choria's and older Conclave's do not)\n", len(stands))
		names := standingNames(stands)
		for i, c := range stands {
			health := "healthy"
			if !c.Healthy {
				health = "unhealthy"
			}
			lead := ""
			if c.Leader {
				lead = ", leader"
			}
			fmt.Fprintf(tw, "  %s\tpriority %d, %s%s, since %s (%s)\n", names[i], c.Priority, health, lead, c.Since.Local().Format(textTime), ago(c.Since, now))
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "Bucket:\t%s\n", bucket)
	fmt.Fprintf(tw, "  TTL:\t%s\n", ttlText(cfg.MaxAge))
	replicas := fmt.Sprint(cfg.Replicas)
	if cluster != "" {
		replicas += " (cluster " + cluster + ")"
	}
	fmt.Fprintf(tw, "  Replicas:\t%s\n", replicas)
	fmt.Fprintf(tw, "  History:\t%d\n", cfg.MaxMsgsPerSubject)
	fmt.Fprintf(tw, "  Storage:\t%s\n", strings.ToLower(cfg.Storage.String()))
	markers := "off"
	if cfg.SubjectDeleteMarkerTTL > 0 {
		markers = fmt.Sprintf("on (kept %v)", cfg.SubjectDeleteMarkerTTL)
	}
	fmt.Fprintf(tw, "  Limit markers:\t%s\n", markers)
	perKey := "off (keys expire by the bucket TTL only)"
	if cfg.AllowMsgTTL {
		perKey = "on"
	}
	fmt.Fprintf(tw, "  Per-key TTL:\t%s\n", perKey)
	fmt.Fprintf(tw, "  Max value size:\t%s\n", sizeText(cfg.MaxMsgSize))
	fmt.Fprintf(tw, "  Keys and markers:\t%d\n", values)
	fmt.Fprintf(tw, "  Consumers:\t%s\n", use)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(warnings) == 0 {
		_, err := fmt.Fprintln(w, "\nNo problems found with the bucket's settings or its replicas.")
		return err
	}
	fmt.Fprintln(w, "\nWARNINGS:")
	for _, warn := range warnings {
		fmt.Fprintf(w, "  - %s\n", warn)
	}
	return nil
}

func ttlText(d time.Duration) string {
	if d <= 0 {
		return "none (keys never expire)"
	}
	return d.String()
}

func sizeText(n int32) string {
	if n <= 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%d B", n)
}

// bucketWarnings lists what is wrong with a bucket's settings for
// elections, as package fit judges it for candidates and the broker too.
// clustered says whether the broker is one of several.
func bucketWarnings(name string, cfg jetstream.StreamConfig, clustered bool) []string {
	var out []string
	for _, p := range fit.Check(cfg, fit.Use{Clustered: clustered}) {
		text := p.Text
		if p.Refused {
			text += "; Conclave candidates refuse such a bucket"
		}
		if name == bucket.Name && p.Refused {
			text += " (a Conclave broker sets it right when it starts)"
		}
		out = append(out, text)
	}
	return out
}

// consumerUse is the consumers on the bucket's stream against its limit.
type consumerUse struct {
	In    int
	Limit broker.ConsumerLimit
}

// String renders "12 of 1000000 (the stream's limit)".
func (u consumerUse) String() string {
	return fmt.Sprintf("%d of %s", u.In, u.Limit)
}

// nearLimit reports whether the consumers are within 10% of the limit.
func (u consumerUse) nearLimit() bool {
	return !u.Limit.Unlimited() && u.Limit.Max > 0 && u.In*10 >= u.Limit.Max*9
}

// warning is the warning about consumers close to the limit, or "".
func (u consumerUse) warning(name string) string {
	if !u.nearLimit() {
		return ""
	}
	stream := "KV_" + name
	var raise string
	switch u.Limit.Source {
	case broker.LimitAccount:
		raise = fmt.Sprintf("the account's JetStream limit applies (max consumers %d, for each stream of the account): raise it in the server's or the operator's account configuration; the stream's own limit cannot go above it", u.Limit.Max)
	case broker.LimitServer:
		raise = fmt.Sprintf("the stream sets no limit, so the server's default applies: give the stream one with `nats stream edit %s --max-consumers 1000000`, or raise the server's default with jetstream { limits { default_max_consumers: -1 } } in its configuration", stream)
	default:
		raise = fmt.Sprintf("raise the stream's limit with `nats stream edit %s --max-consumers N` (N above %d)", stream, u.Limit.Max)
	}
	fix := ""
	if name == bucket.Name && u.Limit.Source == broker.LimitServer {
		fix = " (a Conclave broker sets the stream's limit to " + fmt.Sprint(broker.DefaultMaxConsumers) + " when it starts)"
	}
	return fmt.Sprintf("%d consumers in use of a limit of %s: each watch (candidates, observers, `conclave election watch`) is a consumer, and the server refuses new ones past the limit; %s%s",
		u.In, u.Limit, raise, fix)
}

// replicas is what the bucket's stream says of its replicas: a summary
// for the Replicas line ("leader node-0, node-2 offline"), and a warning
// for each replica that is not in step with the leader.
type replicas struct {
	summary  string
	warnings []string
}

// replicaHealth judges the bucket's replicas from the stream's cluster
// information: the leader, and each other replica current, behind the
// leader, or offline. A stream of one replica, or a broker that is not
// clustered, has nothing to report.
func replicaHealth(ci *jetstream.ClusterInfo, want int) replicas {
	if ci == nil || want <= 1 {
		return replicas{}
	}
	var r replicas
	quorum := want/2 + 1
	up := 0
	var parts []string
	if ci.Leader == "" {
		parts = append(parts, "no leader")
		r.warnings = append(r.warnings, fmt.Sprintf("the bucket's replicas have no leader: elections cannot be written or read until a majority (%d of %d) of them is up and has elected one", quorum, want))
	} else {
		up++
		parts = append(parts, "leader "+ci.Leader)
	}
	for _, p := range ci.Replicas {
		switch {
		case p.Offline:
			parts = append(parts, p.Name+" offline")
			r.warnings = append(r.warnings, fmt.Sprintf("replica %s of the bucket is offline (last seen %s ago)", p.Name, p.Active.Round(time.Millisecond)))
		case !p.Current:
			what := "not current"
			if p.Lag > 0 {
				what = fmt.Sprintf("behind by %d operations", p.Lag)
			}
			parts = append(parts, p.Name+" "+what)
			r.warnings = append(r.warnings, fmt.Sprintf("replica %s of the bucket is %s (last seen %s ago): it is offline or catching up", p.Name, what, p.Active.Round(time.Millisecond)))
		default:
			up++
			parts = append(parts, p.Name+" current")
		}
	}
	if missing := want - 1 - len(ci.Replicas); ci.Leader != "" && missing > 0 {
		parts = append(parts, fmt.Sprintf("%d not placed", missing))
		r.warnings = append(r.warnings, fmt.Sprintf("%d of the bucket's %d replicas are not placed on any broker: the cluster has fewer brokers than replicas, or some never joined", missing, want))
	}
	if len(r.warnings) > 0 && ci.Leader != "" {
		lose := up - quorum
		switch {
		case lose < 0:
			r.warnings = append(r.warnings, fmt.Sprintf("only %d of %d replicas are in step, fewer than a majority (%d): writes (campaigns, renewals) wait until more are back", up, want, quorum))
		case lose == 0:
			r.warnings = append(r.warnings, fmt.Sprintf("%d of %d replicas are in step, just a majority: elections go on, but losing one more broker stops them", up, want))
		}
	}
	r.summary = strings.Join(parts, ", ")
	return r
}
