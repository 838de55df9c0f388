package benchproc

import (
	"os"
	"testing"
)

// TestCPUTicksOfThisProcess reads this process's CPU time, which grows.
func TestCPUTicksOfThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	before, err := CPUTicks(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for after := before; after == before; after, _ = CPUTicks(os.Getpid()) {
		for i := range 10_000_000 {
			x += i
		}
	}
	if _, err := CPUTicks(-1); err == nil {
		t.Error("CPUTicks(-1) = nil error")
	}
	_ = x
}

// TestFreePort returns a port that can be listened on.
func TestFreePort(t *testing.T) {
	p, err := FreePort()
	if err != nil || p <= 0 {
		t.Fatalf("FreePort = %d, %v", p, err)
	}
}
