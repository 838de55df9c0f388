package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/conclave-io/conclave/shards"
)

// ShardRecorder records shard groups into Prometheus metrics. It implements
// shards.Recorder; share one among all the groups of a process.
//
//	conclave_shards_held          shards held now, by group and running member (identity/instance)
//	conclave_shards_moves_total   shards moved, by group and cause: rebalance, leave, unhealthy, takeover
//
// The member a shard moves to counts the move, by why it moved: from a
// member that held more than its share (rebalance), that leaves (leave) or
// is unhealthy (unhealthy), or from nobody (takeover: free at the start, or
// left by a member that vanished, once its key expired). So a group's
// moves are the sum over its members' processes.
type ShardRecorder struct {
	held  *prometheus.GaugeVec
	moves *prometheus.CounterVec
}

var _ shards.Recorder = (*ShardRecorder)(nil)

// NewShards returns a ShardRecorder whose metrics are registered on reg. It
// fails if reg already has them.
func NewShards(reg prometheus.Registerer) (*ShardRecorder, error) {
	r := &ShardRecorder{
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "conclave_shards_held", Help: "Shards of the group this member holds now.",
		}, []string{"group", "member"}),
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "conclave_shards_moves_total", Help: "Shards this process's members began to hold, by why they moved: rebalance, leave, unhealthy, or takeover (from nobody).",
		}, []string{"group", "cause"}),
	}
	for _, c := range []prometheus.Collector{r.held, r.moves} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Holding sets how many shards of group member holds.
func (r *ShardRecorder) Holding(group, member string, n int) {
	r.held.WithLabelValues(group, member).Set(float64(n))
}

// Left removes the series of member, which stopped: a process that makes
// new groups keeps one series per member running, not one per member ever.
func (r *ShardRecorder) Left(group, member string) {
	r.held.DeleteLabelValues(group, member)
}

// Moved counts a move of a shard of group.
func (r *ShardRecorder) Moved(group string, cause shards.MoveCause) {
	r.moves.WithLabelValues(group, string(cause)).Inc()
}
