package shards

import "errors"

var (
	// ErrInvalidGroup means the group's name cannot name election keys:
	// GROUP.i must be a valid NATS KV key (letters, digits, '-', '_', '='
	// and '/', tokens separated by '.', no wildcards).
	ErrInvalidGroup = errors.New("shards: invalid group name")
	// ErrInvalidShardCount means the number of shards is out of range (1 to
	// MaxShards).
	ErrInvalidShardCount = errors.New("shards: invalid shard count")
	// ErrInvalidIdentity means the member's identity cannot be a key's
	// value.
	ErrInvalidIdentity = errors.New("shards: invalid identity")
	// ErrInvalidOption means an option was given a value it cannot use.
	ErrInvalidOption = errors.New("shards: invalid option")
	// ErrAlreadyStarted is returned by a second call to Start: a Group runs
	// once; make a new one to run again.
	ErrAlreadyStarted = errors.New("shards: already started")
	// ErrShardCountMismatch is returned by Start when a member of the group
	// that started first was given another number of shards: the members
	// of a group must agree on it, or the shards beyond the smaller count
	// are held by nobody. The member that started later hands its shards
	// over and stops; the earlier one logs an error and carries on without
	// it.
	ErrShardCountMismatch = errors.New("shards: members disagree on the group's shard count")
)
