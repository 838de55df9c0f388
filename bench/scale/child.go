package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/conclave-io/conclave"
	"github.com/conclave-io/conclave/bucket"
	"github.com/conclave-io/conclave/internal/nostanding"
	"github.com/conclave-io/conclave/providers/election/streams"
)

// A candidate process is this program run with -child. It builds its
// elections, prints a "ready" line, and then answers commands, one a line,
// on its standard input with JSON lines on its standard output:
//
//	go            start campaigning in every election (no answer)
//	status        answer a "status" line: elections led now, wins, losses
//	wins <ns>     answer a "wins" line: the elections whose last OnWon was at
//	              or after <ns> (Unix nanoseconds), with those times
//	mem           collect garbage, then answer a "mem" line: goroutines,
//	              live heap and objects, goroutine stacks, for its candidates
//	cpu-start <f> start a CPU profile into file f; answer "ok"
//	cpu-stop      end the CPU profile; answer "ok"
//	heap <f>      collect garbage, write a heap profile (live and allocated
//	              since the start) to file f; answer "ok"
//
// When its standard input closes it stops every campaign (leaders release)
// and exits, so it never outlives the benchmark. It never prints a line per
// election event: the parent follows the elections through the bucket.

// Message types a candidate process prints.
const (
	msgReady  = "ready"
	msgStatus = "status"
	msgWins   = "wins"
	msgMem    = "mem"
	msgOK     = "ok"
	msgError  = "error"
)

// childMsg is one line a candidate process prints.
type childMsg struct {
	Type      string    `json:"type"`
	Elections int       `json:"elections,omitempty"`
	Leading   int64     `json:"leading,omitempty"`
	Wins      int64     `json:"wins,omitempty"`
	Losses    int64     `json:"losses,omitempty"`
	Failed    int64     `json:"failed,omitempty"`      // campaigns whose Start returned an error
	Err       string    `json:"err,omitempty"`         // an error message, or the first failed campaign's
	Keys      []int     `json:"keys,omitempty"`        // wins: election indexes (0-based, in the process's own list)
	At        []int64   `json:"at,omitempty"`          // wins: their last OnWon, Unix nanoseconds
	Setup     float64   `json:"setup_s,omitempty"`     // ready: seconds spent building the elections
	BaseRSS   float64   `json:"base_rss_mb,omitempty"` // ready: RSS once connected, before any election
	Started   int64     `json:"started,omitempty"`     // status: campaigns started
	Returned  int64     `json:"returned,omitempty"`    // status: campaigns whose Start returned
	KVMsgs    int64     `json:"kv_msgs,omitempty"`     // status: messages on the bucket's subjects its connection received
	OwnMsgs   int64     `json:"own_msgs,omitempty"`    // status: those on its own keys
	InMsgs    uint64    `json:"in_msgs,omitempty"`     // status: every message its connection received
	Mem       *memStats `json:"mem,omitempty"`         // mem: the process's memory after a GC
}

// memStats is a candidate process's memory and goroutines at rest, after a
// garbage collection. Choria's candidate processes (bench/choria) answer
// "mem" with the same fields.
type memStats struct {
	Candidates  int    `json:"candidates"`
	Goroutines  int    `json:"goroutines"`
	HeapBytes   uint64 `json:"heap_bytes"`   // live heap (HeapAlloc) after runtime.GC
	HeapObjects uint64 `json:"heap_objects"` // live objects after runtime.GC
	StackBytes  uint64 `json:"stack_bytes"`  // goroutine stacks in use (StackInuse)
	SysBytes    uint64 `json:"sys_bytes"`    // memory the Go runtime got from the OS
}

// readMem collects garbage and reads this process's memory for candidates
// candidates.
func readMem(candidates int) *memStats {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return &memStats{Candidates: candidates, Goroutines: runtime.NumGoroutine(), HeapBytes: ms.HeapAlloc,
		HeapObjects: ms.HeapObjects, StackBytes: ms.StackInuse, SysBytes: ms.Sys}
}

// childRequested reports whether the command line asks for a candidate
// process.
func childRequested(args []string) bool {
	for _, a := range args {
		if a == "-child" || a == "--child" || strings.HasPrefix(a, "-child=") || strings.HasPrefix(a, "--child=") {
			return true
		}
	}
	return false
}

// member keeps what a candidate process counts about its elections.
type member struct {
	leading  atomic.Int64
	wins     atomic.Int64
	losses   atomic.Int64
	failed   atomic.Int64
	started  atomic.Int64
	returned atomic.Int64
	lastWin  []atomic.Int64 // per election, Unix nanoseconds of the last OnWon
	firstErr atomic.Pointer[string]
}

// runChild is the candidate process's main.
func runChild(args []string) error {
	fs := flag.NewFlagSet("scale -child", flag.ContinueOnError)
	fs.Bool("child", false, "run as a candidate process (internal)")
	cfgPath := fs.String("child-config", "", "configuration file")
	keysPath := fs.String("child-keys", "", "file of the election keys to campaign in, one a line")
	announce := fs.Bool("child-announce", true, "announce who is standing; false: no announcements, answers or subscriptions (internal/nostanding)")
	copies := fs.Int("child-copies", 1, "candidates in each election (all under the process's identity)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cfgPath == "" || *keysPath == "" {
		return errors.New("-child needs -child-config and -child-keys")
	}
	if *copies < 1 {
		return fmt.Errorf("-child-copies %d: at least 1", *copies)
	}
	keys, err := readKeys(*keysPath)
	if err != nil {
		return err
	}
	// Only the command loop prints, one line at a time, flushed at once.
	bw := bufio.NewWriterSize(os.Stdout, 1<<16)
	w := json.NewEncoder(bw)
	emit := func(m childMsg) {
		_ = w.Encode(m)
		_ = bw.Flush()
	}
	if err := campaignAll(*cfgPath, keys, *copies, *announce, emit); err != nil {
		emit(childMsg{Type: msgError, Err: err.Error()})
		return err
	}
	return nil
}

// campaignAll builds copies elections per key over one framework, then
// serves the commands on standard input until it closes.
//
// The framework's one connection is made by the framework's Connect, with
// the settings of the connection it would make itself, plus a dialer that
// counts the messages delivered on the bucket's subjects.
func campaignAll(cfgPath string, keys []string, copies int, announce bool, emit func(childMsg)) error {
	began := time.Now()
	n := len(keys)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	campaignCtx := ctx
	if !announce {
		campaignCtx = nostanding.Context(ctx)
	}

	dialFW, err := conclave.New(cfgPath)
	if err != nil {
		return fmt.Errorf("framework: %w", err)
	}
	counter := newDeliveryCounter(bucket.Name, keys)
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	nc, err := dialFW.Connect(cctx, nats.SetCustomDialer(newCountingDialer(counter)))
	ccancel()
	_ = dialFW.Close()
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer nc.Close()
	fw, err := conclave.New(cfgPath, conclave.WithConnection(nc))
	if err != nil {
		return fmt.Errorf("framework: %w", err)
	}
	defer fw.Close()
	base, err := rssMB(os.Getpid())
	if err != nil {
		return err
	}

	m := &member{lastWin: make([]atomic.Int64, n)}
	elections := make([]*streams.Election, n*copies)
	if err := buildElections(ctx, fw, keys, m, elections); err != nil {
		return err
	}
	emit(childMsg{Type: msgReady, Elections: n, Setup: time.Since(began).Seconds(), BaseRSS: base})
	var cpuProfile *os.File
	defer func() {
		if cpuProfile != nil {
			pprof.StopCPUProfile()
			cpuProfile.Close()
		}
	}()

	var wg sync.WaitGroup
	in := bufio.NewScanner(os.Stdin)
	started := false
	for in.Scan() {
		cmd, arg, _ := strings.Cut(strings.TrimSpace(in.Text()), " ")
		switch cmd {
		case "go":
			if started {
				continue
			}
			started = true
			// Launched: the candidates at rest share the process's
			// scheduler, with no goroutine each (see streams.Launch).
			for _, e := range elections {
				m.started.Add(1)
				wg.Add(1)
				e.Launch(campaignCtx, func(err error) {
					defer wg.Done()
					defer m.returned.Add(1)
					if err != nil {
						m.failed.Add(1)
						msg := err.Error()
						m.firstErr.CompareAndSwap(nil, &msg)
					}
				})
			}
		case "status":
			st := childMsg{Type: msgStatus, Elections: n, Leading: m.leading.Load(), Wins: m.wins.Load(), Losses: m.losses.Load(),
				Failed: m.failed.Load(), Started: m.started.Load(), Returned: m.returned.Load(),
				KVMsgs: counter.kv.Load(), OwnMsgs: counter.mine.Load(), InMsgs: nc.Stats().InMsgs}
			if p := m.firstErr.Load(); p != nil {
				st.Err = *p
			}
			emit(st)
		case "wins":
			since, err := strconv.ParseInt(arg, 10, 64)
			if err != nil {
				emit(childMsg{Type: msgError, Err: fmt.Sprintf("wins %q: %v", arg, err)})
				continue
			}
			ws := childMsg{Type: msgWins}
			for i := range m.lastWin {
				if at := m.lastWin[i].Load(); at >= since {
					ws.Keys = append(ws.Keys, i)
					ws.At = append(ws.At, at)
				}
			}
			emit(ws)
		case "mem":
			emit(childMsg{Type: msgMem, Mem: readMem(len(elections))})
		case "cpu-start", "cpu-stop", "heap":
			if err := profileCommand(cmd, arg, &cpuProfile); err != nil {
				emit(childMsg{Type: msgError, Err: err.Error()})
				continue
			}
			emit(childMsg{Type: msgOK})
		default:
			emit(childMsg{Type: msgError, Err: fmt.Sprintf("unknown command %q", cmd)})
		}
	}
	// Standard input closed: the benchmark is done with this process.
	cancel()
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%d of %d campaigns still running 10s after the stop", m.started.Load()-m.returned.Load(), n)
	}
	return nil
}

// profileCommand runs a profiling command of the command loop: cpu-start
// path, cpu-stop, or heap path. *cpu is the file of the CPU profile
// running, if any.
func profileCommand(cmd, path string, cpu **os.File) error {
	switch cmd {
	case "cpu-start":
		if *cpu != nil {
			return errors.New("cpu-start: a CPU profile is already running")
		}
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("cpu-start: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("cpu-start: %w", err)
		}
		*cpu = f
	case "cpu-stop":
		if *cpu == nil {
			return errors.New("cpu-stop: no CPU profile running")
		}
		pprof.StopCPUProfile()
		err := (*cpu).Close()
		*cpu = nil
		if err != nil {
			return fmt.Errorf("cpu-stop: %w", err)
		}
	case "heap":
		runtime.GC()
		if err := writeProfile(path, func(w io.Writer) error { return pprof.Lookup("heap").WriteTo(w, 0) }); err != nil {
			return fmt.Errorf("heap: %w", err)
		}
		// The goroutines beside it: what runs at rest.
		goroutines := strings.TrimSuffix(path, ".pprof") + ".goroutines.txt"
		if err := writeProfile(goroutines, func(w io.Writer) error { return pprof.Lookup("goroutine").WriteTo(w, 1) }); err != nil {
			return fmt.Errorf("heap: goroutines: %w", err)
		}
	}
	return nil
}

// writeProfile creates the file path and writes it with write. The file
// is closed on return; an error of write's comes before one of Close's.
func writeProfile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// buildElections creates the elections with fw.NewElection, a few at a
// time, each counting its wins and losses into m: elections holds
// len(elections)/len(keys) candidates in each key, candidate i in key
// i mod len(keys).
func buildElections(ctx context.Context, fw *conclave.Framework, keys []string, m *member, elections []*streams.Election) error {
	const workers = 8
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(elections) {
					return
				}
				k := i % len(keys)
				key := keys[k]
				e, err := fw.NewCampaign(ctx, nil, key,
					streams.OnWon(func() {
						m.lastWin[k].Store(time.Now().UnixNano())
						m.wins.Add(1)
						m.leading.Add(1)
					}),
					streams.OnLost(func() {
						m.losses.Add(1)
						m.leading.Add(-1)
					}))
				if err != nil {
					errOnce.Do(func() { first = fmt.Errorf("election %s: %w", key, err) })
					next.Store(int64(len(elections))) // stop the other workers
					return
				}
				elections[i] = e
			}
		})
	}
	wg.Wait()
	return first
}
