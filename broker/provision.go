package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/bucket/fit"
)

// electionSubjects are the subjects of bucket.Stream, as the KV API sets them.
var electionSubjects = []string{"$KV." + bucket.Name + ".>"}

const (
	// DefaultMaxValueSize is the stream's largest message, in bytes, for a
	// BucketSpec with no MaxValueSize. Values are candidate identities, which
	// are short. As with every KV bucket, the server counts a write's headers
	// too (a compare-and-swap update carries about 50 bytes), so values of up
	// to about 950 bytes fit.
	DefaultMaxValueSize = 1024

	// DefaultMaxConsumers is the election stream's consumer limit (the
	// stream's MaxConsumers) for a BucketSpec with no MaxConsumers.
	//
	// nats-server caps every stream at JSDefaultMaxConsumersPerStream
	// (1,000) consumers unless the stream, the account or the server's
	// JetStreamLimits.DefaultMaxConsumers sets a limit, and it reads a stream
	// limit of -1 (what the KV API sets) as "not set", so the 1,000 default
	// applies to it. A watch is a consumer, so that default would cap the
	// whole platform at 1,000 watching processes-per-election.
	//
	// The bucket carries its own limit rather than relying on the server
	// option: the limit travels with the bucket (the same on every node of a
	// cluster, whichever is the meta leader, on a store later served by a
	// plain nats-server, and through an upgrade in which some nodes still run
	// an older broker), operators see it with `nats stream info`, and other
	// streams on the broker keep the server's default as protection. A
	// stream cannot say "unlimited" (-1 means "not set"), so the limit is a
	// number no deployment of elections reaches: each consumer also costs the
	// server CPU (10,000 consumers took about 0.36 cores), so a single broker
	// runs out of CPU long before a million consumers.
	DefaultMaxConsumers = 1_000_000

	// electionHistory is the number of values kept per key: only the latest.
	electionHistory = 1

	// maxDuplicateWindow caps the duplicate window as the KV API does.
	maxDuplicateWindow = 2 * time.Minute
)

// BucketSpec is what the election bucket must look like. Settings the spec
// does not name (description, metadata, compression, placement, …) are left
// as an existing bucket has them.
type BucketSpec struct {
	// TTL is how long a key lives after its last write (the stream's MaxAge):
	// the election's campaign interval. At least bucket.MinTTL.
	TTL time.Duration
	// Replicas is the number of servers holding the bucket, 1 to bucket.MaxReplicas.
	Replicas int
	// MaxValueSize is the largest value in bytes; 0 means DefaultMaxValueSize.
	MaxValueSize int32
	// MaxConsumers is the least consumer limit the stream gets (its
	// MaxConsumers); 0 means DefaultMaxConsumers. Provisioning raises a lower
	// limit, or an unset one, to it but leaves a higher limit an operator set
	// as it is. When the account's JetStream limit is lower, the stream gets
	// the account's limit (the server refuses more), and that governs.
	MaxConsumers int
	// PerKeyTTL turns on per-message TTLs (the stream's AllowMsgTTL) so that
	// writes may carry their own TTL. Once on, the server cannot turn it off
	// again, so false leaves an existing bucket's setting as it is. Limit
	// markers are never turned on: Choria's clients fail to Create a key
	// after one.
	PerKeyTTL bool
	// DenyRollup turns rollups off (the stream's AllowRollup false), so that
	// no client can wipe the bucket with a Nats-Rollup header: headers are not
	// subject to permissions, so any user allowed to write one key could
	// otherwise erase every other key. The broker sets it when users are
	// configured. False allows rollups, as the KV API creates buckets (a KV
	// Purge needs them; elections never purge). Provisioning changes an
	// existing bucket either way.
	DenyRollup bool
}

// Validate checks the spec and returns an error wrapping ErrInvalidConfig.
func (s BucketSpec) Validate() error {
	switch {
	case s.TTL < bucket.MinTTL:
		return fmt.Errorf("%w: bucket TTL %v is shorter than %v", ErrInvalidConfig, s.TTL, bucket.MinTTL)
	case s.Replicas < 1 || s.Replicas > bucket.MaxReplicas:
		return fmt.Errorf("%w: bucket replicas %d is not 1 to %d", ErrInvalidConfig, s.Replicas, bucket.MaxReplicas)
	case s.MaxValueSize < 0:
		return fmt.Errorf("%w: bucket max value size %d is negative", ErrInvalidConfig, s.MaxValueSize)
	case s.MaxConsumers < 0:
		return fmt.Errorf("%w: bucket max consumers %d is negative (a stream cannot be unlimited: -1 means the server's default of %d)",
			ErrInvalidConfig, s.MaxConsumers, server.JSDefaultMaxConsumersPerStream)
	}
	return nil
}

func (s BucketSpec) maxConsumers() int {
	if s.MaxConsumers == 0 {
		return DefaultMaxConsumers
	}
	return s.MaxConsumers
}

func (s BucketSpec) maxValueSize() int32 {
	if s.MaxValueSize == 0 {
		return DefaultMaxValueSize
	}
	return s.MaxValueSize
}

// duplicateWindow is the KV API's choice: the TTL, at most two minutes. The
// server refuses a window longer than MaxAge, so a shorter TTL needs it.
func (s BucketSpec) duplicateWindow() time.Duration {
	return min(s.TTL, maxDuplicateWindow)
}

// SettingChange is one setting ProvisionElectionBucket changed.
type SettingChange struct {
	// Setting names the setting: "TTL", "history", "replicas", …
	Setting string
	// From and To are the old and new values as operators read them.
	From, To string
}

// String renders the change as "TTL 1m0s → 30s".
func (c SettingChange) String() string {
	return fmt.Sprintf("%s %s → %s", c.Setting, c.From, c.To)
}

// ProvisionReport says what ProvisionElectionBucket did.
type ProvisionReport struct {
	// Created is true when the bucket did not exist and this call created
	// it. When several brokers create it at the same moment, one of them
	// does and the others provision it as an existing bucket (unless their
	// requests carry the same first revision: then the server accepts each).
	Created bool
	// CreatedMeanwhile is true when the bucket was created while this
	// broker was starting, but not (as far as it knows) by this call: by a
	// peer of the cluster, or by an earlier try of this broker whose
	// answer came too late. A Broker fills it in (it knows when it
	// started); ProvisionElectionBucket leaves it false.
	CreatedMeanwhile bool
	// BucketCreated is when the bucket's stream was created, as the
	// server says.
	BucketCreated time.Time
	// Changes lists the settings of an existing bucket that were updated, or
	// for a created bucket those set after creating it. Empty when the bucket
	// already had the wanted settings.
	Changes []SettingChange
	// Config is the stream configuration after provisioning.
	Config jetstream.StreamConfig
	// Consumers is the most consumers the election stream accepts after
	// provisioning, and what sets that limit.
	Consumers ConsumerLimit
	// Warnings are the problems package fit finds with the provisioned
	// bucket that do not stop elections but weaken them, such as one
	// replica on a cluster. A Broker fills them in (it knows its cluster)
	// and logs each at warn level; ProvisionElectionBucket leaves them
	// empty. A problem that would make candidates refuse the bucket is an
	// error instead.
	Warnings []fit.Problem
}

// Changed reports whether the bucket was created or updated.
func (r ProvisionReport) Changed() bool { return r.Created || r.CreatedMeanwhile || len(r.Changes) > 0 }

// String summarises the report: "created", "created during start-up (…)",
// "unchanged" or the changes.
func (r ProvisionReport) String() string {
	var parts []string
	switch {
	case r.Created:
		parts = append(parts, "created")
	case r.CreatedMeanwhile:
		parts = append(parts, "created during start-up (by this broker or a peer)")
	}
	for _, c := range r.Changes {
		parts = append(parts, c.String())
	}
	if len(parts) == 0 {
		return "unchanged"
	}
	return strings.Join(parts, ", ")
}

// ProvisionElectionBucket makes the election bucket look like spec on the
// JetStream js talks to: it creates the bucket when it is missing, updates the
// settings spec names when they differ, and leaves other settings alone. It
// logs each change on log at info level ("TTL 1m0s → 30s"); log may be nil.
//
// It returns an error wrapping ErrInvalidConfig for a bad spec,
// ErrNotEnoughServers when the servers cannot hold spec.Replicas copies,
// ErrBucketMisconfigured when the existing bucket has a setting that cannot
// be changed in place, and otherwise the JetStream error (the server not
// ready, a timeout, …), which a caller may retry.
//
// Several callers may provision the same bucket at once (every node of a
// cluster does at start-up): the result is the same.
func ProvisionElectionBucket(ctx context.Context, js jetstream.JetStream, spec BucketSpec, log *logrus.Entry) (ProvisionReport, error) {
	if err := spec.Validate(); err != nil {
		return ProvisionReport{}, err
	}
	var report ProvisionReport
	account, err := js.AccountInfo(ctx)
	if err != nil {
		return ProvisionReport{}, fmt.Errorf("broker: reading the JetStream account's limits: %w", err)
	}
	stream, err := js.Stream(ctx, bucket.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		stream, err = createBucket(ctx, js, spec)
		switch {
		case err == nil:
			report.Created = true
			if log != nil {
				log.Infof("Created election bucket %s: TTL %v, %d replicas, history %d, max value size %d B, revisions from %d",
					bucket.Name, spec.TTL, spec.Replicas, electionHistory, spec.maxValueSize(), stream.CachedInfo().Config.FirstSeq)
			}
		case errors.Is(err, errCreateRaced):
			// Another broker created it first: provision what it made.
			stream, err = js.Stream(ctx, bucket.Stream)
		default:
			return ProvisionReport{}, err
		}
	}
	if err != nil {
		return ProvisionReport{}, fmt.Errorf("broker: reading election bucket %s: %w", bucket.Name, err)
	}

	report.BucketCreated = stream.CachedInfo().Created
	current := stream.CachedInfo().Config
	if err := checkUnchangeable(current); err != nil {
		return ProvisionReport{}, err
	}
	wanted, changes := reconcile(current, spec, accountConsumerLimit(account, spec.Replicas))
	report.Config = current
	report.Consumers = EffectiveConsumerLimit(current, account, 0)
	if len(changes) == 0 {
		if log != nil && !report.Created {
			log.Debugf("Election bucket %s already has the wanted settings", bucket.Name)
		}
		return report, nil
	}
	info, err := js.UpdateStream(ctx, wanted)
	if err != nil {
		return ProvisionReport{}, fmt.Errorf("broker: updating election bucket %s (%s): %w", bucket.Name, joinChanges(changes), classify(err, spec))
	}
	report.Changes = changes
	report.Config = info.CachedInfo().Config
	report.Consumers = EffectiveConsumerLimit(report.Config, account, 0)
	if log != nil {
		for _, c := range changes {
			log.WithField("setting", c.Setting).Infof("Election bucket %s: %s", bucket.Name, c)
		}
	}
	return report, nil
}

// errCreateRaced is createBucket's error when the bucket appeared meanwhile.
var errCreateRaced = errors.New("broker: election bucket created meanwhile")

// bucketDescription is the description of a bucket createBucket makes.
const bucketDescription = "Leader elections: one key per election, the value is the leader's identity"

// createBucket creates the bucket's stream with the shape the KV API gives a
// bucket (see bucketStreamConfig), so KV clients (ours, Choria's, the nats
// CLI) open it as any other bucket, and with revisions that start above those
// of any earlier bucket of the same name.
func createBucket(ctx context.Context, js jetstream.JetStream, spec BucketSpec) (jetstream.Stream, error) {
	stream, err := js.CreateStream(ctx, bucketStreamConfig(spec, firstRevision(time.Now())))
	if err != nil {
		// The bucket exists now: another broker's create, with its own
		// first revision, came first.
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, errCreateRaced
		}
		return nil, fmt.Errorf("broker: creating election bucket %s: %w", bucket.Name, classify(err, spec))
	}
	return stream, nil
}

// firstRevision is the first revision of a bucket created at now: the
// wall-clock time in microseconds since the Unix epoch (about 1.8e15 in
// 2026). A term's fencing token is the revision of the write that began it,
// and a deleted bucket's revisions are gone with it, so a recreated bucket
// starting at 1 would hand out tokens again. Starting at the clock instead,
// a recreated bucket's revisions exceed every revision an earlier bucket
// could have reached unless that bucket took more than one write per
// microsecond, a million a second, sustained over its whole life (one
// server does about 26k a second), or the creating broker's clock is behind
// the earlier creator's by nearly as long as that bucket lived. The values
// stay below 2^53, exact in JSON clients that read numbers as doubles, until
// the year 2255.
func firstRevision(now time.Time) uint64 {
	return uint64(now.UnixMicro())
}

// bucketStreamConfig is the stream that jetstream.JetStream.CreateKeyValue
// creates for a bucket with the spec's settings, file storage, history 1 and
// bucketDescription, plus a first sequence. Everything but FirstSeq (and
// rollups, off when the spec denies them) must stay as the KV API sets it,
// so that clients see a bucket like any other. Like
// CreateKeyValue, it leaves the consumer limit unset and per-message TTLs off
// (reconcile then sets both as the spec asks) and limit markers off (Choria's
// clients fail to Create a key after one).
func bucketStreamConfig(spec BucketSpec, firstSeq uint64) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              bucket.Stream,
		Description:       bucketDescription,
		Subjects:          slices.Clone(electionSubjects),
		Retention:         jetstream.LimitsPolicy,
		MaxConsumers:      -1,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		Discard:           jetstream.DiscardNew,
		MaxAge:            spec.TTL,
		MaxMsgsPerSubject: electionHistory,
		MaxMsgSize:        spec.maxValueSize(),
		Storage:           jetstream.FileStorage,
		Replicas:          spec.Replicas,
		Duplicates:        spec.duplicateWindow(),
		AllowRollup:       !spec.DenyRollup,
		DenyDelete:        true,
		AllowDirect:       true,
		FirstSeq:          firstSeq,
	}
}

// checkUnchangeable returns ErrBucketMisconfigured when the bucket has a
// setting an update cannot fix.
func checkUnchangeable(c jetstream.StreamConfig) error {
	var problems []string
	if c.Storage != jetstream.FileStorage {
		problems = append(problems, fmt.Sprintf("storage is %s, not file, and cannot be changed in place", c.Storage))
	}
	if c.Retention != jetstream.LimitsPolicy {
		problems = append(problems, fmt.Sprintf("retention is %s, not limits", c.Retention))
	}
	if c.Mirror != nil || len(c.Sources) > 0 {
		problems = append(problems, "it is a mirror or has sources, so it does not accept writes of its own")
	}
	if c.Sealed {
		problems = append(problems, "it is sealed and accepts no writes")
	}
	if !slices.Equal(c.Subjects, electionSubjects) {
		problems = append(problems, fmt.Sprintf("its subjects are %q, not %q", c.Subjects, electionSubjects))
	}
	if c.PersistMode != jetstream.DefaultPersistMode {
		problems = append(problems, fmt.Sprintf("persist mode is %s, which acknowledges writes before they are stored, and cannot be changed in place", c.PersistMode))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: stream %s: %s; back up anything you need, delete the bucket (nats kv del %s; running elections restart) and start the broker again to recreate it",
		ErrBucketMisconfigured, bucket.Stream, strings.Join(problems, "; "), bucket.Name)
}

// reconcile returns current with the settings spec manages set as spec wants
// them, and the list of what that changes. accountMax is the account's
// consumer limit for the stream (0 or less: none).
func reconcile(current jetstream.StreamConfig, spec BucketSpec, accountMax int) (jetstream.StreamConfig, []SettingChange) {
	wanted := current
	var changes []SettingChange
	note := func(setting, from, to string) {
		changes = append(changes, SettingChange{Setting: setting, From: from, To: to})
	}

	if current.MaxAge != spec.TTL {
		note("TTL", durationText(current.MaxAge), durationText(spec.TTL))
		wanted.MaxAge = spec.TTL
	}
	if current.MaxMsgsPerSubject != electionHistory {
		note("history", limitText(current.MaxMsgsPerSubject), limitText(electionHistory))
		wanted.MaxMsgsPerSubject = electionHistory
	}
	if current.Replicas != spec.Replicas {
		note("replicas", fmt.Sprint(current.Replicas), fmt.Sprint(spec.Replicas))
		wanted.Replicas = spec.Replicas
	}
	if size := spec.maxValueSize(); current.MaxMsgSize != size {
		note("max value size", bytesText(int64(current.MaxMsgSize)), bytesText(int64(size)))
		wanted.MaxMsgSize = size
	}
	// The server refuses a stream limit above the account's, and the
	// account's then governs anyway.
	maxc := spec.maxConsumers()
	if accountMax > 0 {
		maxc = min(maxc, accountMax)
	}
	if current.MaxConsumers < maxc {
		note("max consumers", streamConsumersText(current.MaxConsumers), fmt.Sprint(maxc))
		wanted.MaxConsumers = maxc
	}
	if current.SubjectDeleteMarkerTTL != 0 {
		note("limit marker TTL", durationText(current.SubjectDeleteMarkerTTL), "off")
		wanted.SubjectDeleteMarkerTTL = 0
	}
	if spec.PerKeyTTL && !current.AllowMsgTTL {
		note("per-key TTL", "off", "on")
		wanted.AllowMsgTTL = true
	}
	if window := spec.duplicateWindow(); current.Duplicates != window {
		note("duplicate window", durationText(current.Duplicates), durationText(window))
		wanted.Duplicates = window
	}
	if !current.DenyDelete {
		note("deny delete", "off", "on")
		wanted.DenyDelete = true
	}
	if !current.AllowDirect {
		note("direct get", "off", "on")
		wanted.AllowDirect = true
	}
	if allow := !spec.DenyRollup; current.AllowRollup != allow {
		note("rollup", onOff(current.AllowRollup), onOff(allow))
		wanted.AllowRollup = allow
	}
	return wanted, changes
}

// classify wraps a JetStream error that means too few servers in
// ErrNotEnoughServers, keeping the original error.
func classify(err error, spec BucketSpec) error {
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return err
	}
	switch api.ErrorCode {
	case 10074: // replicas > 1 not supported in non-clustered mode
		return fmt.Errorf("%w: %d replicas wanted but the server is not clustered (1 server); set %s to 1 or -1: %w",
			ErrNotEnoughServers, spec.Replicas, keyReplicas, err)
	case 10023, 10005: // insufficient resources; no suitable peers for placement
		return fmt.Errorf("%w: %d replicas wanted but fewer JetStream servers are available (check that all peers are up, or lower %s): %w",
			ErrNotEnoughServers, spec.Replicas, keyReplicas, err)
	}
	return err
}

func joinChanges(changes []SettingChange) string {
	parts := make([]string, len(changes))
	for i, c := range changes {
		parts[i] = c.String()
	}
	return strings.Join(parts, ", ")
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

func durationText(d time.Duration) string {
	if d <= 0 {
		return "unlimited"
	}
	return d.String()
}

func limitText(n int64) string {
	if n <= 0 {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

func bytesText(n int64) string {
	if n <= 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%d B", n)
}
