package broker_test

import (
	"testing"

	"github.com/conclave-io/conclave/bucket/fit"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/brokertest"
)

func TestProvisionedBucketIsJudgedAsCandidatesJudgeIt(t *testing.T) {
	t.Run("single server", func(t *testing.T) {
		b := brokertest.StartSingle(t, nil)
		if w := b.ProvisionReport().Warnings; len(w) != 0 {
			t.Fatalf("a default single broker's bucket has warnings %v, want none", w)
		}
	})
	t.Run("one replica on a cluster", func(t *testing.T) {
		c := brokertest.StartCluster(t, 3, func(_ int, cfg *config.Config) { cfg.LeaderElectionReplicas = 1 })
		for i, b := range c.Brokers() {
			w := b.ProvisionReport().Warnings
			if len(w) != 1 || w[0].Kind != fit.OneReplica || w[0].Refused {
				t.Errorf("node %d: warnings %+v, want one unrefused %v warning", i, w, fit.OneReplica)
			}
		}
	})
}
