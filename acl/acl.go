// Package acl compiles Conclave's per-election permissions (the broker's
// plugin.conclave.user.NAME.* keys) into NATS allow lists over the election
// bucket's subjects and the JetStream API subjects a key-value client uses.
//
// Only allow lists are produced: NATS matches a wildcard in a published
// subject as a literal token, so a deny list can be bypassed.
//
// NATS cannot tell a delete from a write by its subject, so a user that may
// campaign in an election may also release it and stand its leader down.
// The package has no nats-server dependency: the broker converts.
package acl

import (
	"github.com/conclave-io/conclave/providers/election/standing"
	"slices"
	"strings"
)

// InboxPrefix is the inbox prefix of user: its clients must use it
// (nats.CustomInboxPrefix), and only it may subscribe under it, so that no
// user can read another's replies.
func InboxPrefix(user string) string { return "_INBOX." + user }

// Grant is what one user may do.
type Grant struct {
	// Campaign lists the elections (names or patterns) the user may
	// campaign in, stand down and watch.
	Campaign []string
	// Observe lists the elections the user may only watch.
	Observe []string
	// Admin lets the user watch every election and stand any down.
	Admin bool
}

// Permissions are NATS allow lists.
type Permissions struct {
	// Publish lists the subjects the user may publish to.
	Publish []string `json:"publish"`
	// Subscribe lists the subjects the user may subscribe to.
	Subscribe []string `json:"subscribe"`
	// AllowResponses lets the user answer requests it receives (NATS
	// allow_responses: up to AnswersPerRequest replies to each request's
	// reply subject, which is another user's inbox): candidates answer who
	// is standing and requests to hand over. Set for users who may
	// campaign.
	AllowResponses bool `json:"allow_responses"`
}

// AnswersPerRequest is how many answers a connection may send to one
// request it receives: every candidate it runs in an election answers who
// is standing (copies of one program on one connection), and NATS counts
// the answers per connection. It is the most answers an asker reads
// (package standing).
const AnswersPerRequest = 1024

// streamName is the JetStream stream behind a KV bucket.
func streamName(bucket string) string { return "KV_" + bucket }

// shardGroupSubjects returns the subjects of the shard groups whose every
// shard election pattern p covers: G and its subgroups for G.>, all for >.
func shardGroupSubjects(bucket, p string) []string {
	if p == ">" {
		return []string{standing.ShardsSubject(bucket, ">")}
	}
	if g, ok := strings.CutSuffix(p, ".>"); ok && g != "" {
		return []string{standing.ShardsSubject(bucket, g), standing.ShardsSubject(bucket, g+".>")}
	}
	return nil
}

// Compile returns the allow lists of user with grant g on bucket, sorted
// and without duplicates. A grant that allows nothing compiles to empty
// lists (not nil), which NATS reads as "nothing".
//
// For each election pattern P the user may campaign in:
//   - publish $KV.<bucket>.P: campaign, renew, release, stand down;
//   - publish and subscribe conclave.candidates.<bucket>.P: ask who is
//     standing (as a candidate wins) and answer it;
//   - publish and subscribe conclave.announce.<bucket>.P: announce itself,
//     and hear the others' announcements as leader;
//   - publish and subscribe conclave.handover.<bucket>.P: ask the leader to
//     hand over to a named candidate, take such requests as leader, offer
//     the key to the named candidate, and take such an offer up;
//   - answer requests (AllowResponses): the answers go to the asker's inbox;
//   - publish and subscribe conclave.shards.<bucket>.G and
//     conclave.shards.<bucket>.G.> when P is G.> (every shard of the groups
//     named G or under it), or conclave.shards.<bucket>.> when P is >: the
//     members of a shard group announce themselves there.
//
// For each P the user may observe:
//   - publish conclave.candidates.<bucket>.P: ask who is standing;
//   - subscribe conclave.announce.<bucket>.P: hear the candidates'
//     announcements, which an observer counts (streams.ObserveStanding);
//     they say nothing that asking does not.
//
// For each P the user may campaign in or observe:
//   - publish $JS.API.DIRECT.GET.KV_<bucket>.$KV.<bucket>.P: read the key;
//   - publish $JS.API.CONSUMER.CREATE.KV_<bucket>.*.$KV.<bucket>.P: watch it
//     (the server checks the filter in the request is the one in the
//     subject; the consumer's name, the *, is random).
//
// And whenever it may do anything:
//   - publish $JS.API.STREAM.INFO.KV_<bucket>: open the bucket, read its TTL;
//   - publish $JS.API.CONSUMER.{MSG.NEXT,INFO,DELETE}.KV_<bucket>.*: pull
//     from its watches' consumers, check and delete them;
//   - publish $JS.FC.KV_<bucket>.>: answer the flow control of push
//     watches (nats.go's kv.Watch), which otherwise stall after ~2 MB;
//   - subscribe InboxPrefix(user).>: its replies and deliveries;
//   - subscribe $JS.EVENT.ADVISORY.STREAM.*.KV_<bucket>: the stream's
//     announcements that its settings changed, so that leaders learn of a
//     new TTL at once rather than by their routine reads.
//
// A user who may campaign in or observe every election (">") may also:
//   - publish $JS.API.CONSUMER.CREATE.KV_<bucket>.*: make a consumer with
//     several filters, with which a process following many elections
//     with flat names holds a few consumers rather than one per election.
//     It could read every key, so narrower grants do not allow it.
//
// Admin is campaign and observe ">" plus $JS.API.INFO (the account's
// JetStream usage, which `conclave election info` reads). No grant allows
// purging, deleting or reconfiguring the bucket.
func Compile(bucket, user string, g Grant) Permissions {
	stream := streamName(bucket)
	kv := "$KV." + bucket + "."
	pub := []string{}
	campaign, observe := g.Campaign, g.Observe
	if g.Admin {
		campaign = append(slices.Clone(campaign), ">")
		pub = append(pub, "$JS.API.INFO")
	}
	sub := []string{}
	for _, p := range campaign {
		pub = append(pub, kv+p, standing.CandidatesSubject(bucket, p), standing.AnnounceSubject(bucket, p), standing.HandOverSubject(bucket, p))
		sub = append(sub, standing.CandidatesSubject(bucket, p), standing.AnnounceSubject(bucket, p), standing.HandOverSubject(bucket, p))
		groups := shardGroupSubjects(bucket, p)
		pub, sub = append(pub, groups...), append(sub, groups...)
	}
	for _, p := range observe {
		pub = append(pub, standing.CandidatesSubject(bucket, p))
		sub = append(sub, standing.AnnounceSubject(bucket, p))
	}
	for _, p := range append(slices.Clone(campaign), observe...) {
		if p == ">" {
			pub = append(pub, "$JS.API.CONSUMER.CREATE."+stream+".*")
		}
		pub = append(pub,
			"$JS.API.DIRECT.GET."+stream+"."+kv+p,
			"$JS.API.CONSUMER.CREATE."+stream+".*."+kv+p)
	}
	if len(pub) == 0 {
		return Permissions{Publish: []string{}, Subscribe: []string{}}
	}
	pub = append(pub,
		// Flow-control replies of push watches (nats.go's kv.Watch):
		// without them the server stops delivering after ~2 MB.
		"$JS.FC."+stream+".>",
		"$JS.API.STREAM.INFO."+stream,
		"$JS.API.CONSUMER.MSG.NEXT."+stream+".*",
		"$JS.API.CONSUMER.INFO."+stream+".*",
		"$JS.API.CONSUMER.DELETE."+stream+".*")
	slices.Sort(pub)
	sub = append(sub, "$JS.EVENT.ADVISORY.STREAM.*."+stream, InboxPrefix(user)+".>")
	slices.Sort(sub)
	return Permissions{Publish: slices.Compact(pub), Subscribe: slices.Compact(sub), AllowResponses: len(campaign) > 0}
}
