package conclave

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave/shards"
)

// NewShardGroup returns this process's member of shard group group of n
// shards, under the framework's identity, over conn, or over the shared
// connection when conn is nil. Run it with Start; it runs until Start's
// context ends, then hands its shards over to the other members.
//
//	g, err := fw.NewShardGroup(ctx, nil, "ingest", 64,
//		shards.OnAssigned(func(shard int, term *streams.Term) { /* start; term.Token() fences it */ }),
//		shards.OnRevoked(func(shard int) { /* stop */ }))
//	...
//	err = g.Start(ctx)
//
// Members under one identity, such as copies of a program on one host,
// are distinct members that share the shards (shards.Group.Member).
//
// Before opts it adds shards.WithLogger with fw.Logger("shards") marked
// with the group's name; with WithRegisterer, the framework's shard metrics
// recorder; and WithHealthCheck's check. Options in opts override them.
// ctx bounds connecting and opening the bucket, not the group's run.
//
// It returns an error wrapping ErrNoBroker when the shared connection
// cannot be made, ErrNoBucket when the broker has no election bucket,
// ErrClosed after Close, and those of shards.NewGroup
// (shards.ErrInvalidGroup, shards.ErrInvalidShardCount, …).
func (fw *Framework) NewShardGroup(ctx context.Context, conn *nats.Conn, group string, n int, opts ...shards.Option) (*shards.Group, error) {
	if err := shards.ValidateGroup(group); err != nil {
		return nil, err
	}
	_, js, err := fw.bucket(ctx, conn)
	if err != nil {
		return nil, err
	}
	all := []shards.Option{shards.WithLogger(fw.Logger("shards").WithField("group", group))}
	if fw.shardRecorder != nil {
		all = append(all, shards.WithRecorder(fw.shardRecorder))
	}
	if fw.health != nil {
		all = append(all, shards.WithHealthCheck(fw.health, fw.healthEvery))
	}
	all = append(all, opts...)
	return shards.NewGroup(fw.Identity(), group, n, js, all...)
}
