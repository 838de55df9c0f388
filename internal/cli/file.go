package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/conclave-io/conclave/providers/election/streams"
)

func (e *elections) fileCommand() *cobra.Command {
	var identity string
	var verbose, asJSON bool
	cmd := &cobra.Command{
		Use:   "file [flags] NAME PATH",
		Short: "Campaign in an election and keep a file present only while leading",
		Long: `Campaigns in election NAME (as run does: --identity, else the --config file's
identity, $CONCLAVE_IDENTITY overriding it, else the host name) and keeps PATH
present only while leading, for jobs that should run on the leader alone,
such as cron entries that start with [ -f PATH ] || exit 0.

PATH is written when a term begins, holding the identity and the term's
fencing token ("identity token"), and removed when the term ends: when
leadership is lost, at the term's local deadline at the latest (before the
key can expire), and when file stops. file removes only what it wrote: a
PATH left from an earlier run (holding "identity token" of this identity, of
a term no longer running) is removed before campaigning; one of a term still
running is left while that term is renewed (a copy of this program leading
with the same PATH) and removed before its lease runs out unrenewed (this
program's own, from before a crash); and a PATH that holds anything else, or
is a directory, is refused before campaigning.
On Ctrl-C (SIGINT) or SIGTERM, file removes PATH, hands the election over at
once (to the best-ranked standby it knows of, or by a release that any
candidate may take), and exits with status 0.

What a file cannot do: a job that checked the file keeps running after the
file is removed, and a file survives a SIGKILL of this process until it runs
again (it is removed then before the killed term's lease runs out). Use election run, which stops the command, when that matters.`,
		Example: `  conclave election file nightly-report /run/conclave/nightly-report.leader
  # crontab: 0 2 * * * [ -f /run/conclave/nightly-report.leader ] && /usr/local/bin/report`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.file(cmd.Context(), args[0], args[1], identity, verbose, asJSON)
		},
	}
	cmd.Flags().StringVar(&identity, "identity", "", "the name to campaign as (default: --config's identity, $CONCLAVE_IDENTITY, else the host name)")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log what the election does")
	cmd.Flags().BoolVar(&asJSON, "json", false, "log to standard error as JSON, one object per line")
	return cmd
}

// leaderFile keeps a file present while a term lasts.
type leaderFile struct {
	path     string
	identity string        // this command's: a leftover of another identity is refused
	retired  chan struct{} // closed once retire decided; nil when it does not run
	log      *eventLog
	// stopping, when it returns a reason, is why a term ends while the
	// command stops: the stop, not a lost leadership.
	stopping func() (string, bool)

	mu    sync.Mutex
	term  *streams.Term // the term the file is for, nil when absent
	wrote string        // what this process wrote in the file, "" when it is not this process's
}

func (e *elections) file(ctx context.Context, name, path, identityFlag string, verbose, asJSON bool) error {
	if err := validateElectionName(name); err != nil {
		return err
	}
	if dir := filepath.Dir(path); dir != "" {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return fmt.Errorf("the directory of %s does not exist or is not a directory: create it first", path)
		}
	}
	identity, from, err := e.a.identity(identityFlag)
	if err != nil {
		return err
	}
	log := newEventLog(e.a.stderr, asJSON)
	log.election, log.identity = name, identity
	var ledAtStop atomic.Bool // the term ended because of the stop
	lf := &leaderFile{path: path, identity: identity, log: log, stopping: func() (string, bool) {
		if ctx.Err() == nil {
			return "", false
		}
		ledAtStop.Store(true)
		return "stopping: handing " + name + " over", true
	}}
	if _, _, err := lf.readOwn(); err != nil { // refused before connecting: nothing to wait for
		return err
	}
	s, err := e.open(ctx, connectOptions{name: "conclave election file " + name, longLived: true, wait: true, log: log, verbose: verbose})
	if err != nil && ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	defer s.Close()
	defer lf.awaitRetire() // before the connection closes
	if err := lf.clearStale(ctx, s, name); err != nil {
		return err
	}
	el, err := streams.NewElection(identity, name, s.js,
		streams.InBucket(s.bucket),
		streams.OnLeading(lf.lead),
		streams.OnLost(func() {
			lf.mu.Lock()
			t := lf.term
			lf.mu.Unlock()
			why := "leadership lost"
			if stop, ok := lf.stopping(); ok {
				why = stop
			} else if t != nil {
				why = "leadership lost: " + t.Cause().String()
			}
			_ = lf.remove(why)
		}),
		streams.WithLogger(stderrLogger{log: log, verbose: verbose}),
	)
	if err != nil {
		return err
	}
	log.event("campaigning", map[string]any{"instance": el.Instance()}, "%s campaigning in %s (identity from %s, instance %s; bucket %s on %s); %s exists only while it leads", identity, name, from, el.Instance(), s.bucket, s.url, path)
	err = el.Start(ctx)
	if rerr := lf.remove("stopping"); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("election %s: %w", name, err)
	}
	switch to := el.HandedOverTo(); {
	case ledAtStop.Load() && to != "":
		toName, toInstance := s.takerName(ctx, name, to)
		log.event("handed_over", map[string]any{"new_leader": to, "new_leader_instance": toInstance, "exit_status": 0}, "handed %s over to %s, which leads at once; exiting with status 0", name, toName)
	case ledAtStop.Load():
		log.event("released", map[string]any{"exit_status": 0}, "released %s (no standby took it up); exiting with status 0", name)
	default:
		log.event("stopped_campaigning", map[string]any{"exit_status": 0}, "stopped campaigning in %s (not leading); exiting with status 0", name)
	}
	return nil
}

// lead writes the file for term t, and removes it when t ends, at its
// local deadline at the latest, renewals moving that deadline on.
func (lf *leaderFile) lead(t *streams.Term) {
	tmp := lf.path + ".tmp"
	content := fmt.Sprintf("%s %d\n", t.Identity(), t.Token())
	err := os.WriteFile(tmp, []byte(content), 0o644)
	if err == nil {
		err = os.Rename(tmp, lf.path)
	}
	if err != nil {
		lf.log.event("error", nil, "cannot write %s: %v", lf.path, err)
		return
	}
	lf.mu.Lock()
	lf.term, lf.wrote = t, content
	lf.mu.Unlock()
	lf.log.event("leading", map[string]any{"token": t.Token()}, "%s leads %s, token %d: wrote %s", t.Identity(), t.Key(), t.Token(), lf.path)
	go func() {
		for t.Valid() {
			timer := time.NewTimer(time.Until(t.ValidUntil()))
			select {
			case <-t.Done():
			case <-timer.C:
			}
			timer.Stop()
		}
		lf.mu.Lock()
		mine := lf.term == t
		lf.mu.Unlock()
		if mine {
			why := "term ended"
			if stop, ok := lf.stopping(); ok {
				why = stop
			}
			_ = lf.remove(why)
		}
	}()
}

// remove deletes the file if it holds what this process wrote, saying why:
// a copy of this program that leads with the same path keeps its own.
func (lf *leaderFile) remove(why string) error {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	lf.term = nil
	wrote := lf.wrote
	lf.wrote = ""
	if wrote == "" {
		return nil
	}
	if raw, err := os.ReadFile(lf.path); err == nil && string(raw) != wrote {
		return nil // written since by another copy's term
	}
	return lf.unlink(why)
}

// unlink deletes the file, if present, saying why.
func (lf *leaderFile) unlink(why string) error {
	err := os.Remove(lf.path)
	switch {
	case err == nil:
		lf.log.event("removed", nil, "removed %s (%s)", lf.path, why)
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return nil
	}
	return fmt.Errorf("cannot remove %s (%s): %w: remove it by hand, or jobs will believe this host leads", lf.path, why, err)
}

// read returns the identity and token the file holds, ok false when there
// is no file; an error when the path holds something file did not write.
func (lf *leaderFile) read() (identity string, token uint64, err error) {
	info, err := os.Lstat(lf.path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("cannot read %s: %w", lf.path, err)
	}
	if !info.Mode().IsRegular() {
		return "", 0, fmt.Errorf("%s is a %s, not a file: give election file the path of a file it may create and remove", lf.path, describeMode(info.Mode()))
	}
	raw, err := os.ReadFile(lf.path)
	if err != nil {
		return "", 0, fmt.Errorf("cannot read %s: %w", lf.path, err)
	}
	identity, token, ok := parseLeaderFile(string(raw))
	if !ok {
		return "", 0, fmt.Errorf("%s exists and was not written by election file (it holds %d bytes that are not \"identity token\"): file would remove it whenever this host does not lead; give another path, or remove it yourself", lf.path, len(raw))
	}
	return identity, token, nil
}

// parseLeaderFile reads "identity token\n", as lead writes it.
func parseLeaderFile(content string) (identity string, token uint64, ok bool) {
	line, found := strings.CutSuffix(content, "\n")
	i := strings.LastIndexByte(line, ' ')
	if !found || i <= 0 || strings.Contains(line, "\n") {
		return "", 0, false
	}
	token, err := strconv.ParseUint(line[i+1:], 10, 64)
	if err != nil || token == 0 {
		return "", 0, false
	}
	return line[:i], token, true
}

// describeMode names what a path that is not a regular file is.
func describeMode(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return "special file"
}

// readOwn is read for a file this command may remove: one of its
// identity's.
func (lf *leaderFile) readOwn() (identity string, token uint64, err error) {
	identity, token, err = lf.read()
	if err == nil && token != 0 && identity != lf.identity {
		return "", 0, fmt.Errorf("%s holds the leader file of %s, not of %s, which this command campaigns as: give another path, or remove it yourself", lf.path, identity, lf.identity)
	}
	return identity, token, err
}

// clearStale removes a file left from an earlier run: one that names a
// term of election name no longer running. One of the running term is
// this command's own from before a crash, or another copy's leading with
// the same path: it is left while that term is renewed, and removed
// before its lease can run out unrenewed (retire), so that no other host
// leads while this one's file says it does.
func (lf *leaderFile) clearStale(ctx context.Context, s *session, name string) error {
	identity, token, err := lf.readOwn()
	if err != nil || token == 0 {
		return err
	}
	r, ok := s.readRaw(ctx, name)
	if !ok || r.State != streams.KeyHeld || r.Leader != identity || r.Token() != token {
		return lf.unlink("left from an earlier run")
	}
	st, err := s.status(ctx)
	if err != nil {
		return err
	}
	lf.log.event("warning", map[string]any{"leader": named(r.Leader, r.Instance), "token": token},
		"%s belongs to the running term of %s (token %d): left while that term is renewed (give each copy a path of its own)",
		lf.path, named(r.Leader, r.Instance), token)
	raw, err := os.ReadFile(lf.path)
	if err != nil {
		return nil // gone meanwhile
	}
	lf.retired = make(chan struct{})
	go lf.retire(ctx, s, name, token, string(raw), r, st.TTL())
	return nil
}

// retire decides, within about a tenth of ttl after r (the latest write of
// the term token of election name, as clearStale read it) expires, whose the
// file holding content is: renewed since, the term is another copy's, which
// removes its own file; ended, or not renewed by a tenth of ttl before its
// lease runs out, it was this command's before a crash, and the file is
// removed, if this command has not written it since, before another can
// lead. It runs on while the command stops (awaitRetire).
func (lf *leaderFile) retire(ctx context.Context, s *session, name string, token uint64, content string, r record, ttl time.Duration) {
	defer close(lf.retired)
	ctx = context.WithoutCancel(ctx)
	deadline := r.Written.Add(ttl - ttl/10)
	for time.Now().Before(deadline) {
		time.Sleep(min(ttl/6, time.Until(deadline)))
		next, ok := s.readRaw(ctx, name)
		if !ok {
			continue // no answer: ask again until the deadline
		}
		if next.State != streams.KeyHeld || next.Token() != token {
			break // the term ended
		}
		if next.Written.After(r.Written) {
			return // renewed: a live copy's term
		}
	}
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if raw, err := os.ReadFile(lf.path); lf.wrote == "" && err == nil && string(raw) == content {
		_ = lf.unlink(fmt.Sprintf("left by term %d, which is no longer renewed", token))
	}
}

// awaitRetire waits for retire, if it runs, to decide.
func (lf *leaderFile) awaitRetire() {
	if lf.retired != nil {
		<-lf.retired
	}
}
