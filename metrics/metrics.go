// Package metrics exposes elections as Prometheus metrics, registered on a
// registerer the caller passes: nothing is registered globally.
//
//	reg := prometheus.NewRegistry()
//	rec, err := metrics.New(reg)
//	e, err := streams.NewElection(id, key, js, streams.WithRecorder(rec))
//
// Metrics, each labelled with the election key:
//
//	conclave_election_leader                    candidates of this process leading (0 or 1), 0 from a candidate's start
//	conclave_election_campaigns_total           attempts to win (state="candidate") and renewals (state="leader")
//	conclave_election_wins_total                terms begun
//	conclave_election_losses_total              terms ended, by cause: released, deposed, deadline, expired, closed, denied, handed over
//	conclave_election_renew_duration_seconds    histogram of successful renewals' request time
//	conclave_election_last_renewal_age_seconds  time since the last successful write, while leading
//	conclave_election_candidates                candidates standing, by health="healthy" or "unhealthy", as this process hears their announcements
//
// conclave_election_candidates counts candidates of the election, in any
// process, this one's included, as this process hears them: the leader's
// process and an observer given streams.ObserveStanding and
// streams.WithRecorder hear every candidate's announcements; a
// process whose candidate is a standby counts that candidate alone. So
// aggregate with max, not sum: the max is the election's count once the
// leader has asked who stands (within half its minimum term of winning)
// or heard an interval of announcements; run an observer (fw.NewObserver)
// for a count that does not dip as leadership moves, or while the leader
// is Choria's or its process exports no metrics. A process
// reports it while one of its candidates stands in the election, or while
// such an observer follows it. A candidate that stops leaves the count at
// once; one whose process dies, within two and a half announcement
// intervals (two bucket TTLs each, between 2 s and 2 min): 2.5 min at a
// TTL of 30 s. See streams.Recorder's Standing.
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/conclave-io/conclave/clock"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// Recorder records elections into Prometheus metrics. It implements
// streams.Recorder; share one among all the elections of a process.
type Recorder struct {
	clock     clock.Clock
	leader    *prometheus.GaugeVec
	campaigns *prometheus.CounterVec
	wins      *prometheus.CounterVec
	losses    *prometheus.CounterVec
	renew     *prometheus.HistogramVec
	age       *prometheus.Desc
	standing  *prometheus.Desc

	mu      sync.Mutex
	leading map[string]int
	renewed map[string]time.Time
	counts  map[string]map[string][2]int // election → reporter → healthy, unhealthy candidates
}

var _ streams.Recorder = (*Recorder)(nil)

// Option configures a Recorder.
type Option func(*Recorder)

// WithClock sets the clock the renewal age is read from.
func WithClock(c clock.Clock) Option { return func(r *Recorder) { r.clock = c } }

// New returns a Recorder whose metrics are registered on reg. It fails if
// reg already has them.
func New(reg prometheus.Registerer, opts ...Option) (*Recorder, error) {
	label := []string{"election"}
	r := &Recorder{
		clock: clock.System{},
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "conclave_election_leader", Help: "Number of this process's candidates leading the election (0 or 1).",
		}, label),
		campaigns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "conclave_election_campaigns_total", Help: "Attempts to win (state=candidate) and renewals (state=leader).",
		}, []string{"election", "state"}),
		wins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "conclave_election_wins_total", Help: "Terms this process's candidates began.",
		}, label),
		losses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "conclave_election_losses_total", Help: "Terms this process's candidates ended, by cause: released, deposed, deadline, expired, closed, denied, handed over.",
		}, []string{"election", "cause"}),
		renew: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "conclave_election_renew_duration_seconds", Help: "Time taken by successful renewals.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, label),
		age: prometheus.NewDesc("conclave_election_last_renewal_age_seconds",
			"Seconds since the leader's last successful write, while this process leads.", label, nil),
		standing: prometheus.NewDesc("conclave_election_candidates",
			"Candidates standing in the election, in any process, as this process hears their announcements, by health.", []string{"election", "health"}, nil),
		leading: map[string]int{},
		renewed: map[string]time.Time{},
		counts:  map[string]map[string][2]int{},
	}
	for _, opt := range opts {
		opt(r)
	}
	for _, c := range []prometheus.Collector{r.leader, r.campaigns, r.wins, r.losses, r.renew, ageCollector{r}, standingCollector{r}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Started makes the election's leader gauge appear at 0 when a candidate
// starts (it leaves a value other candidates of the process set alone), so
// that a process that campaigns and never leads, such as a standby that
// waits on a held key, reports conclave_election_leader 0 rather than
// nothing, and "no process leads" is a plain sum == 0 for alerts.
func (r *Recorder) Started(key string) {
	r.leader.WithLabelValues(key) // creates the series at 0; never changes its value
}

// Campaign counts an attempt or a renewal.
func (r *Recorder) Campaign(key string, state streams.State) {
	r.campaigns.WithLabelValues(key, state.String()).Inc()
}

// Won counts a term that began; its winning write counts as a renewal.
func (r *Recorder) Won(key string) {
	r.wins.WithLabelValues(key).Inc()
	r.mu.Lock()
	r.renewed[key] = r.clock.Now()
	r.mu.Unlock()
}

// Lost counts a term that ended.
func (r *Recorder) Lost(key string, cause streams.Cause) {
	r.losses.WithLabelValues(key, cause.String()).Inc()
}

// Renewed records a successful renewal.
func (r *Recorder) Renewed(key string, latency time.Duration) {
	r.renew.WithLabelValues(key).Observe(latency.Seconds())
	r.mu.Lock()
	r.renewed[key] = r.clock.Now()
	r.mu.Unlock()
}

// Leading tracks how many of this process's candidates lead.
func (r *Recorder) Leading(key string, leading bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if leading {
		r.leading[key]++
	} else if r.leading[key] > 0 {
		r.leading[key]--
	}
	r.leader.WithLabelValues(key).Set(float64(r.leading[key]))
}

// ageCollector reports the renewal age at scrape time.
type ageCollector struct{ r *Recorder }

func (c ageCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.r.age }

func (c ageCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	for key, n := range r.leading {
		if n == 0 {
			continue
		}
		ch <- prometheus.MustNewConstMetric(r.age, prometheus.GaugeValue, now.Sub(r.renewed[key]).Seconds(), key)
	}
}

// Standing records how many candidates reporter, a candidate or an
// observer of this process, counts in election key.
func (r *Recorder) Standing(key, reporter string, healthy, unhealthy int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts[key] == nil {
		r.counts[key] = map[string][2]int{}
	}
	r.counts[key][reporter] = [2]int{healthy, unhealthy}
}

// StandingWithdrawn forgets reporter's count: once no reporter of the
// process counts election key, its conclave_election_candidates series
// are gone.
func (r *Recorder) StandingWithdrawn(key, reporter string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.counts[key], reporter)
	if len(r.counts[key]) == 0 {
		delete(r.counts, key)
	}
}

// standingCollector reports the candidates standing at scrape time: per
// election, the count of the reporter that hears the most candidates (a
// leader or an observer hears them all, a standby counts itself).
type standingCollector struct{ r *Recorder }

func (c standingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.r.standing }

func (c standingCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, byReporter := range r.counts {
		var best [2]int
		bestName, found := "", false
		for name, n := range byReporter {
			total, bestTotal := n[0]+n[1], best[0]+best[1]
			if !found || total > bestTotal || (total == bestTotal && name < bestName) {
				best, bestName, found = n, name, true
			}
		}
		ch <- prometheus.MustNewConstMetric(r.standing, prometheus.GaugeValue, float64(best[0]), key, "healthy")
		ch <- prometheus.MustNewConstMetric(r.standing, prometheus.GaugeValue, float64(best[1]), key, "unhealthy")
	}
}
