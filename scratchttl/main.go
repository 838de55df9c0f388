package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	dir, _ := os.MkdirTemp("", "ttlx")
	defer os.RemoveAll(dir)
	srv, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true, SyncAlways: true})
	go srv.Start()
	srv.ReadyForConnections(5 * time.Second)
	nc, _ := nats.Connect(srv.ClientURL())
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KV_X", Subjects: []string{"$KV.X.>"}, MaxMsgsPerSubject: 1, MaxAge: 3 * time.Second, AllowMsgTTL: true, AllowDirect: true, Storage: jetstream.FileStorage})
	if err != nil {
		panic(err)
	}
	for _, ttl := range []time.Duration{time.Second, 3 * time.Second} {
		var lates []time.Duration
		for i := 0; i < 12; i++ {
			subj := fmt.Sprintf("$KV.X.k%d", i)
			var last uint64
			// a few renewals, then stop
			for r := 0; r < 3; r++ {
				m := nats.NewMsg(subj)
				m.Data = []byte("x")
				ack, err := js.PublishMsg(ctx, m, jetstream.WithMsgTTL(ttl), jetstream.WithExpectLastSequencePerSubject(last))
				if err != nil {
					panic(err)
				}
				last = ack.Sequence
				time.Sleep(ttl / 3)
			}
			m := nats.NewMsg(subj)
			ack, err := js.PublishMsg(ctx, m, jetstream.WithMsgTTL(ttl), jetstream.WithExpectLastSequencePerSubject(last))
			if err != nil {
				panic(err)
			}
			_ = ack
			at := time.Now()
			for {
				_, err := st.GetLastMsgForSubject(ctx, subj)
				if errors.Is(err, jetstream.ErrMsgNotFound) {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
			lates = append(lates, time.Since(at)-ttl)
		}
		sort.Slice(lates, func(i, j int) bool { return lates[i] < lates[j] })
		fmt.Println("ttl", ttl, "lateness min", lates[0], "p50", lates[len(lates)/2], "max", lates[len(lates)-1])
	}
}
