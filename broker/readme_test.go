package broker

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/testpki"
)

// TestREADMEConfigFilesAreValid parses every configuration file the README
// shows, and those of the secure three-node setup in docs/security.md, and
// checks that brokers accept them: a newcomer copies them as they are.
func TestREADMEConfigFilesAreValid(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	security, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, setup, ok := strings.Cut(string(security), "\n## A secure three-node cluster\n")
	if !ok {
		t.Fatal("docs/security.md has no section \"A secure three-node cluster\"")
	}
	setup, _, _ = strings.Cut(setup, "\n## ")
	iniBlocks := regexp.MustCompile("(?s)```ini\n(.*?)```")
	blocks := append(iniBlocks.FindAllStringSubmatch(string(readme), -1), iniBlocks.FindAllStringSubmatch(setup, -1)...)
	if len(blocks) < 3 {
		t.Fatalf("found %d ini blocks in the README and the secure setup, want the one-node, three-node and client files", len(blocks))
	}
	var brokers int
	for _, b := range blocks {
		name := strings.TrimPrefix(strings.SplitN(b[1], "\n", 2)[0], "# ")
		t.Run(name, func(t *testing.T) {
			cfg, err := config.ParseWithEnv(strings.NewReader(b[1]), name, nil)
			if err != nil {
				t.Fatalf("the docs' %s: %v", name, err)
			}
			if !cfg.BrokerNetwork {
				if len(cfg.MiddlewareHosts) == 0 {
					t.Fatalf("client file %s names no brokers", name)
				}
				return
			}
			brokers++
			if cfg.TLSConfigured() {
				// The docs' paths are the reader's: use files made now.
				leaf := testpki.NewCA(t, "readme-ca").Issue(t, cfg.Identity)
				cfg.TLSCertificate, cfg.TLSKey, cfg.TLSCA = leaf.CertFile, leaf.KeyFile, leaf.CAFile
			}
			br, err := New(cfg, nil)
			if err != nil {
				t.Fatalf("the docs' %s is refused by the broker: %v", name, err)
			}
			want := 1
			if cfg.PeerPort != 0 {
				want = len(cfg.Peers)
			}
			if got := br.ClusterSize(); got != want {
				t.Fatalf("the docs' %s makes a cluster of %d, want %d", name, got, want)
			}
		})
	}
	if brokers < 2 {
		t.Fatalf("found %d broker files in the README and the secure setup, want the one-node and three-node ones", brokers)
	}
}
