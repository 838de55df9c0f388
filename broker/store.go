package broker

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// storeLockFile is the file in the store directory that a running broker
// holds locked, naming its process.
const storeLockFile = "conclave.lock"

// storeLock is a broker's exclusive hold on its store directory. JetStream
// does not lock its store: two servers on one directory would each recover
// the other's streams and overwrite their files.
type storeLock struct{ f *os.File }

// lockStore takes the store directory for this broker, creating it if
// needed, or returns an error wrapping ErrStoreInUse that names the process
// holding it.
func lockStore(dir, identity string) (*storeLock, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("%w: creating the store directory (%s): %w", ErrServerFailed, keyStreamStore, err)
	}
	path := filepath.Join(dir, storeLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("%w: opening the store's lock file: %w", ErrServerFailed, err)
	}
	locked, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: locking the store %s: %w", ErrServerFailed, dir, err)
	}
	if !locked {
		holder, _ := os.ReadFile(path)
		f.Close()
		who := "another broker"
		if h := string(bytes.TrimSpace(holder)); h != "" {
			who = "another broker (" + h + ")"
		}
		return nil, fmt.Errorf("%w: %s is used by %s: JetStream cannot share a store; give each broker its own %s, or stop the other one first",
			ErrStoreInUse, dir, who, keyStreamStore)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = fmt.Fprintf(f, "broker %s, pid %d, since %s\n", identity, os.Getpid(), time.Now().Format(time.RFC3339))
	}
	return &storeLock{f: f}, nil
}

// release lets another broker use the store. The file stays: removing it
// would race with a broker opening it.
func (l *storeLock) release() {
	if l == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = unlock(l.f)
	_ = l.f.Close()
}

// checkPorts fails with ErrPortInUse when a configured port cannot be
// bound, before anything opens the store: nats-server would recover the
// store first and only then fail to listen.
func (s settings) checkPorts() error {
	for _, p := range []struct {
		key, host string
		port      int
	}{
		{keyClientPort, s.listenHost, s.clientPort},
		{keyPeerPort, s.listenHost, s.peerPort},
		{keyStatsPort, s.statsHost, s.statsPort},
	} {
		if p.port <= 0 {
			continue // off, or any free port
		}
		addr := net.JoinHostPort(p.host, strconv.Itoa(p.port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("%w: %s %d: %s is taken by another program (another broker?): stop it, or choose another port",
					ErrPortInUse, p.key, p.port, addr)
			}
			return fmt.Errorf("%w: %s %d: cannot listen on %s: %w", ErrServerFailed, p.key, p.port, addr, err)
		}
		ln.Close()
	}
	return nil
}
