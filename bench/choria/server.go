package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave/broker"
)

const (
	bucketName = "CHORIA_LEADER_ELECTION"
	streamName = "KV_" + bucketName
)

// startServer starts a nats-server in this process the way every broker in
// this benchmark runs: loopback, JetStream on a file store in dir, and
// SyncAlways, so that an acknowledged write is on disk. With monitor set it
// also serves the HTTP monitoring endpoints (/varz), for brokers in child
// processes.
func startServer(dir string, monitor bool) (*server.Server, error) {
	opts := &server.Options{
		Host: "127.0.0.1", Port: -1,
		JetStream: true, StoreDir: dir, SyncAlways: true,
		NoLog: true, NoSigs: true,
	}
	if monitor {
		opts.HTTPHost, opts.HTTPPort = "127.0.0.1", -1
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("broker: not ready within 10s")
	}
	return srv, nil
}

// createBucket provisions the election bucket exactly as Conclave's broker
// does (broker.ProvisionElectionBucket): one value per key, the TTL, file
// storage, no limit markers, and per-message TTLs on, so that Conclave's
// candidates write with a per-message TTL while Choria's write without one
// and the bucket's MaxAge expires their keys.
func createBucket(ctx context.Context, url string, ttl time.Duration) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return fmt.Errorf("bucket: connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("bucket: %w", err)
	}
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	if _, err := broker.ProvisionElectionBucket(ctx, js, broker.BucketSpec{TTL: ttl, Replicas: 1, PerKeyTTL: true}, logrus.NewEntry(quiet)); err != nil {
		return fmt.Errorf("bucket %s: %w", bucketName, err)
	}
	return nil
}

// streamLastSeq returns the election stream's last sequence: every write to
// any key of the bucket (campaign, renewal, release, removal) adds one.
func streamLastSeq(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	st, err := js.Stream(ctx, streamName)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

// msgCounts is the broker's cumulative message counters, as in /varz.
type msgCounts struct {
	In  int64 `json:"in_msgs"`
	Out int64 `json:"out_msgs"`
}

func (m msgCounts) sub(o msgCounts) msgCounts { return msgCounts{In: m.In - o.In, Out: m.Out - o.Out} }

func localVarz(srv *server.Server) (msgCounts, error) {
	v, err := srv.Varz(nil)
	if err != nil {
		return msgCounts{}, err
	}
	return msgCounts{In: v.InMsgs, Out: v.OutMsgs}, nil
}

// remoteVarz reads /varz from a broker's HTTP monitoring port.
func remoteVarz(ctx context.Context, monitorURL string) (msgCounts, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, monitorURL+"/varz", nil)
	if err != nil {
		return msgCounts{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return msgCounts{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return msgCounts{}, fmt.Errorf("varz: %s", resp.Status)
	}
	var m msgCounts
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return msgCounts{}, fmt.Errorf("varz: %w", err)
	}
	return m, nil
}
