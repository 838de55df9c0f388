package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	choria "github.com/choria-io/go-choria/providers/election/streams"
	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/broker"
	cconfig "github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/testpki"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// TestChoriaOverMutualTLS runs go-choria's election over mutual TLS on a
// Conclave broker configured with Choria's security keys, against a
// Conclave candidate that connects with the same keys:
//
//   - clients without a certificate, with one from another CA, or without
//     TLS at all are refused when they connect;
//   - the Choria candidate, whose only TLS is its NATS connection's
//     (nats.ClientCert and nats.RootCAs), wins the election;
//   - a Conclave candidate then stays standby through at least one TTL and
//     one of Choria's renewals, and reads the Choria candidate's identity
//     as the key's value;
//   - once the Choria candidate stops (its context cancelled, as Choria's
//     users stop it), the Conclave candidate takes over when the key
//     expires, and never before the Choria candidate's Start returned.
//
// It takes 8–17s: Choria's start-up splay (0–5s) and cool-down (0.75×TTL +
// 200ms), one TTL standing by, then the expiry of Choria's last renewal.
func TestChoriaOverMutualTLS(t *testing.T) {
	const (
		ttl        = 4 * time.Second // Choria's smallest at its default campaign interval (0.75×TTL)
		key        = "tls-mixed"
		choriaID   = "choria-tls"
		conclaveID = "conclave-tls"
	)
	started := time.Now()
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("broker and framework logs:\n%s", logs.String())
		}
	})

	ca := testpki.NewCA(t, "election-ca")
	brokerCert := ca.Issue(t, "tls-broker")
	choriaCert := ca.Issue(t, choriaID, testpki.ClientOnly())
	conclaveCert := ca.Issue(t, conclaveID, testpki.ClientOnly())
	intruder := testpki.NewCA(t, "other-ca").Issue(t, "intruder", testpki.ClientOnly())

	// The broker, configured as a Choria broker's file would be; mutual
	// TLS is plugin.choria.network.client_tls_force_required's default.
	b := startTLSBroker(t, logs, fmt.Sprintf(`identity = tls-broker
plugin.choria.broker_network = true
plugin.choria.network.listen_address = 127.0.0.1
plugin.choria.network.client_port = -1
plugin.choria.network.stream.store = %s
plugin.choria.network.stream.leader_election_ttl = %s
plugin.choria.network.stream.leader_election_replicas = 1
plugin.security.provider = file
plugin.security.file.certificate = %s
plugin.security.file.key = %s
plugin.security.file.ca = %s
`, t.TempDir(), ttl, brokerCert.CertFile, brokerCert.KeyFile, brokerCert.CAFile))
	if !b.ClientTLSForceRequired {
		t.Fatal("plugin.choria.network.client_tls_force_required is not true by default")
	}
	u, err := url.Parse(b.url)
	if err != nil || u.Scheme != "tls" {
		t.Fatalf("broker's client URL %q: want a tls:// URL (%v)", b.url, err)
	}

	// Refused: each attempt must fail when it connects, before any election
	// could be built on it.
	foreign, err := tls.LoadX509KeyPair(intruder.CertFile, intruder.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		name, url string
		opts      []nats.Option
	}{
		// The broker asks for a certificate and gets none.
		{"no client certificate", b.url, []nats.Option{nats.RootCAs(ca.File)}},
		// Presented even though the broker names only its own CA as
		// acceptable (with nats.ClientCert Go's TLS client would withhold
		// it, and the broker would see no certificate at all).
		{"certificate from another CA", b.url, []nats.Option{nats.RootCAs(ca.File), nats.Secure(&tls.Config{
			MinVersion: tls.VersionTLS12,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				return &foreign, nil
			},
		})}},
		// A Choria client configured without security: nats.go upgrades to
		// TLS because the broker requires it, and cannot verify the broker.
		{"no TLS settings, nats:// URL", "nats://" + u.Host, nil},
	}
	for _, r := range refused {
		nc, err := connectChoria(r.url, "refused", r.opts...)
		if err == nil {
			nc.Close()
			t.Errorf("%s: the broker accepted the connection", r.name)
			continue
		}
		t.Logf("%s: refused: %v", r.name, err)
	}

	// The Choria candidate: go-choria's election on the legacy JetStream
	// KV API, over a connection with the client certificate and the CA.
	nc, err := connectChoria(b.url, choriaID, nats.ClientCert(choriaCert.CertFile, choriaCert.KeyFile), nats.RootCAs(ca.File))
	if err != nil {
		t.Fatalf("Choria's connection with a client certificate: %v", err)
	}
	defer nc.Close()
	checkTLS(t, nc, "tls-broker")
	cjs, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	ckv, err := cjs.KeyValue(bucketName)
	if err != nil {
		t.Fatalf("Choria: opening %s over TLS: %v", bucketName, err)
	}
	var cmu sync.Mutex
	var cEvents []string
	choriaWon := make(chan struct{}, 1)
	ce, err := choria.NewElection(choriaID, key, ckv,
		choria.OnWon(func() {
			cmu.Lock()
			cEvents = append(cEvents, "won")
			cmu.Unlock()
			choriaWon <- struct{}{}
		}),
		choria.OnLost(func() {
			cmu.Lock()
			cEvents = append(cEvents, "lost")
			cmu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancelChoria := context.WithCancel(context.Background())
	defer cancelChoria()
	choriaDone := make(chan error, 1)
	go func() { choriaDone <- ce.Start(cctx) }()

	// Choria wins after its splay, a campaign interval and 200ms.
	select {
	case <-choriaWon:
		t.Logf("Choria's candidate won after %v", time.Since(started).Round(time.Millisecond))
	case err := <-choriaDone:
		t.Fatalf("Choria's Start returned before winning: %v", err)
	case <-time.After(5*time.Second + ttl*3/4 + 200*time.Millisecond + 5*time.Second):
		t.Fatal("Choria's candidate did not win over TLS")
	}

	// The Conclave candidate: the framework, configured with the same keys
	// a Choria client's file has, and its own certificate.
	cfg, err := cconfig.Parse(strings.NewReader(fmt.Sprintf(`identity = %s
plugin.choria.middleware_hosts = %s
plugin.security.provider = file
plugin.security.file.certificate = %s
plugin.security.file.key = %s
plugin.security.file.ca = %s
`, conclaveID, b.url, conclaveCert.CertFile, conclaveCert.KeyFile, conclaveCert.CAFile)), "conclave-client.conf")
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(logs)
	log.SetLevel(logrus.InfoLevel)
	fw, err := conclave.NewWithConfig(cfg, conclave.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := fw.Connection(ctx)
	if err != nil {
		t.Fatalf("Conclave's connection with a client certificate: %v", err)
	}
	checkTLS(t, conn, "tls-broker")
	kv, err := fw.Bucket(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	before, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatalf("Conclave reading %s: %v", key, err)
	}
	if got := string(before.Value()); got != choriaID {
		t.Fatalf("%s holds %q while Choria's candidate leads, want %q", key, got, choriaID)
	}

	// OnLost is due only when the test stops Conclave's leader at the end.
	conclaveWon := make(chan time.Time, 1)
	var stopping, lostEarly atomic.Bool
	e, err := fw.NewCampaign(ctx, conn, key,
		streams.OnWon(func() { conclaveWon <- time.Now() }),
		streams.OnLost(func() {
			if !stopping.Load() {
				lostEarly.Store(true)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	ectx, stopConclave := context.WithCancel(context.Background())
	conclaveDone := make(chan error, 1)
	go func() { conclaveDone <- e.Start(ectx) }()
	defer func() {
		stopping.Store(true)
		stopConclave()
		if err := <-conclaveDone; err != nil {
			t.Errorf("Conclave's Start: %v", err)
		}
	}()

	// Conclave stands by through one TTL: the key survives it only
	// because Choria renews it, and Conclave must see the renewals.
	select {
	case <-conclaveWon:
		t.Fatal("Conclave's candidate won while Choria's led")
	case err := <-conclaveDone:
		t.Fatalf("Conclave's Start returned while standing by: %v", err)
	case <-time.After(ttl + 500*time.Millisecond):
	}
	if e.IsLeader() {
		t.Fatal("Conclave's candidate counts itself leader while Choria's leads")
	}
	renewed, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(renewed.Value()); got != choriaID || renewed.Revision() <= before.Revision() {
		t.Fatalf("after a TTL %s holds %q at revision %d (before: revision %d): want Choria's renewal of %q", key, got, renewed.Revision(), before.Revision(), choriaID)
	}

	// Choria's candidate stops; its key expires; Conclave's takes over.
	cancelChoria()
	var choriaStopped time.Time
	select {
	case err := <-choriaDone:
		choriaStopped = time.Now()
		if err != nil {
			t.Fatalf("Choria's Start: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Choria's Start did not return after its context was cancelled")
	}
	select {
	case at := <-conclaveWon:
		if at.Before(choriaStopped) {
			t.Fatalf("Conclave's candidate won before Choria's stopped")
		}
		t.Logf("Conclave's candidate won %v after Choria's stopped", at.Sub(choriaStopped).Round(time.Millisecond))
	case <-time.After(ttl + 3*time.Second):
		t.Fatal("Conclave's candidate did not take over after Choria's stopped")
	}
	if !e.IsLeader() || lostEarly.Load() {
		t.Errorf("Conclave's candidate won but counts itself leader: %v, called OnLost: %v", e.IsLeader(), lostEarly.Load())
	}
	final, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(final.Value()); got != conclaveID {
		t.Errorf("%s holds %q after Conclave's candidate won, want %q", key, got, conclaveID)
	}
	// Choria's reading of the key, over its own TLS connection.
	if entry, err := ckv.Get(key); err != nil {
		t.Errorf("Choria's connection reading %s: %v", key, err)
	} else if got := string(entry.Value()); got != conclaveID {
		t.Errorf("Choria's connection reads %q in %s, want %q", got, key, conclaveID)
	}
	cmu.Lock()
	if got := strings.Join(cEvents, ","); got != "won" {
		t.Errorf("Choria's callbacks: %s, want won (a Choria candidate stopped by its context calls no OnLost)", got)
	}
	cmu.Unlock()
	t.Logf("took %v", time.Since(started).Round(time.Millisecond))
}

// tlsBroker is a Conclave broker started for a test, with its settings.
type tlsBroker struct {
	*cconfig.Config
	url string
}

// startTLSBroker starts a Conclave broker in this process from the
// configuration text conf and shuts it down when the test ends.
func startTLSBroker(t *testing.T, logs *syncBuffer, conf string) tlsBroker {
	t.Helper()
	cfg, err := cconfig.Parse(strings.NewReader(conf), "tls-broker.conf")
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(logs)
	log.SetLevel(logrus.InfoLevel)
	b, err := broker.New(cfg, logrus.NewEntry(log))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Shutdown)
	return tlsBroker{Config: cfg, url: b.ClientURL()}
}

// connectChoria connects as a Choria program would, with opts for TLS; it
// does not reconnect, so that a refusal is an error at once.
func connectChoria(url, name string, opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(url, append([]nats.Option{nats.Name(name), nats.Timeout(5 * time.Second), nats.NoReconnect()}, opts...)...)
}

// checkTLS fails the test unless nc runs over TLS 1.2 or later with the
// broker's certificate, named server.
func checkTLS(t *testing.T, nc *nats.Conn, server string) {
	t.Helper()
	st, err := nc.TLSConnectionState()
	if err != nil {
		t.Fatalf("connection to %s is not TLS: %v", nc.ConnectedUrl(), err)
	}
	if !st.HandshakeComplete || st.Version < tls.VersionTLS12 || len(st.PeerCertificates) == 0 {
		t.Fatalf("connection to %s: TLS handshake complete %v, version %x, %d peer certificates", nc.ConnectedUrl(), st.HandshakeComplete, st.Version, len(st.PeerCertificates))
	}
	if cn := st.PeerCertificates[0].Subject.CommonName; cn != server {
		t.Fatalf("connection to %s: the broker presented %q, want %q", nc.ConnectedUrl(), cn, server)
	}
}

// syncBuffer collects log lines from several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
