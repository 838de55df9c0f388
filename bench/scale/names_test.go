package main

import (
	"strings"
	"testing"
)

func TestAssignKeys(t *testing.T) {
	names := keyNames(namesFlat, 1000)
	a := assignKeys(names, 200, 5)
	seen := map[string]int{}
	for _, keys := range a {
		if len(keys) != 5 {
			t.Fatalf("a process got %d keys", len(keys))
		}
		for _, k := range keys {
			seen[k]++
		}
	}
	if len(seen) != 1000 {
		t.Fatalf("%d of 1000 keys assigned", len(seen))
	}
	// 200 x 15 over 1,000: three candidates each, in three processes.
	a = assignKeys(names, 200, 15)
	per := map[string]map[int]bool{}
	for p, keys := range a {
		for _, k := range keys {
			if per[k] == nil {
				per[k] = map[int]bool{}
			}
			per[k][p] = true
		}
	}
	for k, ps := range per {
		if len(ps) != 3 {
			t.Fatalf("%s has candidates in %d processes, want 3", k, len(ps))
		}
	}
	// The one shape: every process in every election.
	for _, keys := range assignKeys(names[:30], 3, 30) {
		if strings.Join(keys, ",") != strings.Join(names[:30], ",") {
			t.Fatalf("one shape: %v", keys)
		}
	}
}

func TestProtoScanner(t *testing.T) {
	d := newDeliveryCounter("CHORIA_LEADER_ELECTION", []string{"svc1", "svc.2"})
	p := &protoScanner{d: d}
	stream := "INFO {\"server_id\":\"x\"}\r\n" +
		"MSG $KV.CHORIA_LEADER_ELECTION.svc1 5 $JS.ACK.a.b.1 2\r\np1\r\n" +
		"HMSG $KV.CHORIA_LEADER_ELECTION.svc.2 6 $JS.ACK.x 18 20\r\nNATS/1.0\r\nA: b\r\n\r\np2\r\n" +
		"MSG $KV.CHORIA_LEADER_ELECTION.svc3 5 $JS.ACK.a.b.1 10\r\nMSG x 1 2\n\r\n" + // a payload that looks like a line
		"HMSG _INBOX.abc.1 7 16 16\r\nNATS/1.0 100\r\n\r\n" + // a heartbeat
		"MSG _INBOX.r.2 3 5\r\n+OK\r\n\r\nPING\r\n"
	// Fed in every split of two, the counts are the same.
	for cut := 0; cut <= len(stream); cut += 7 {
		d.kv.Store(0)
		d.mine.Store(0)
		p.feed([]byte(stream[:cut]))
		p.feed([]byte(stream[cut:]))
		if d.kv.Load() != 3 || d.mine.Load() != 2 {
			t.Fatalf("cut at %d: %d bucket messages, %d own; want 3, 2", cut, d.kv.Load(), d.mine.Load())
		}
		if p.skip != 0 || len(p.line) != 0 {
			t.Fatalf("cut at %d: left in the middle of something (skip %d, line %q)", cut, p.skip, p.line)
		}
	}
}

func TestChoriaLine(t *testing.T) {
	m, err := choriaLine([]byte("READY {}"))
	if err != nil || m.Type != msgReady {
		t.Fatalf("READY: %+v %v", m, err)
	}
	m, err = choriaLine([]byte(`{"leading":[0,3],"wins":4,"losses":1,"errors":1,"error":"x"}`))
	if err != nil || m.Type != msgStatus || m.Leading != 2 || m.Wins != 4 || m.Losses != 1 || m.Failed != 1 || m.Err != "x" || len(m.Keys) != 2 || m.Keys[1] != 3 {
		t.Fatalf("status: %+v %v", m, err)
	}
}
