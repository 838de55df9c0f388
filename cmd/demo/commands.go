package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// commandHelp lists the commands read from standard input.
const commandHelp = `Type a letter and Enter:  s  leader steps down   c  leader crashes   d  delete the key   q  quit`

// readCommands runs the commands typed on stdin until ctx ends or stdin
// does; q calls quit. At the end of stdin the demo keeps running: only q,
// Ctrl-C or SIGTERM stop it. The read itself cannot be interrupted, so this
// goroutine may outlive the demo by one line: it belongs to a process that
// is about to exit.
func (d *demo) readCommands(ctx context.Context, stdin io.Reader, quit context.CancelFunc) {
	lines := bufio.NewScanner(stdin)
	for lines.Scan() {
		if ctx.Err() != nil {
			return
		}
		switch cmd := strings.ToLower(strings.TrimSpace(lines.Text())); cmd {
		case "":
		case "s":
			d.stepDown()
		case "c":
			d.crash()
		case "d":
			d.deleteKey(ctx)
		case "q":
			d.log.Info("Quitting")
			quit()
			return
		default:
			fmt.Fprintf(d.out, "Unknown command %q. %s\n", cmd, commandHelp)
		}
	}
}

// leader returns the worker that leads now, or nil.
func (d *demo) leader() *worker {
	for _, w := range d.workers {
		if w.leads() {
			return w
		}
	}
	return nil
}

func (d *demo) stepDown() {
	w := d.leader()
	if w == nil {
		d.log.Warn("No worker leads right now: nothing to step down")
		return
	}
	d.log.WithField("instance", w.instance).Info("Leader stepping down: it hands the key over to a standby it knows, or releases it; the next worker should lead within milliseconds")
	w.stepDown()
}

func (d *demo) crash() {
	w := d.leader()
	if w == nil {
		d.log.Warn("No worker leads right now: nothing to crash")
		return
	}
	d.log.WithField("instance", w.instance).Infof("Leader crashing: its connection is cut, so its key stays until it expires; the next worker should lead within about %v", d.ttl)
	w.crash()
}

func (d *demo) deleteKey(ctx context.Context) {
	kv, err := d.fw.Bucket(ctx, nil)
	if err != nil {
		d.log.Errorf("Cannot delete the key: %v", err)
		return
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := kv.Delete(dctx, d.s.key); err != nil {
		d.log.Errorf("Cannot delete the key: %v", err)
		return
	}
	d.log.Infof("Deleted key %s: the leader is deposed; the next one waits a TTL (%v) before leading, until the deposed one has surely noticed", d.s.key, d.ttl)
}
