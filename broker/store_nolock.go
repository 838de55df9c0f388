//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package broker

import "os"

// tryLock cannot lock files on this system: the store is not protected
// from a second broker, as docs/config.md says.
func tryLock(*os.File) (bool, error) { return true, nil }

func unlock(*os.File) error { return nil }
