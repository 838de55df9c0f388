package faults

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestCalibrationConvertsGoTimesToMono(t *testing.T) {
	c := Calibrate()
	if c.Uncertainty() > time.Millisecond {
		t.Fatalf("calibration uncertainty %v", c.Uncertainty())
	}
	before := Mono()
	now := time.Now()
	after := Mono()
	got := c.Mono(now)
	slack := int64(c.Uncertainty()) + int64(time.Microsecond)
	if got < before-slack || got > after+slack {
		t.Fatalf("converted %d outside [%d, %d]", got, before, after)
	}
	if d := c.Mono(now.Add(time.Second)) - got; d != int64(time.Second) {
		t.Fatalf("a second later converts %dns later", d)
	}
}

// TestMonoComparesAcrossProcesses checks the point of Mono: a child
// process's reading falls between two of the parent's.
func TestMonoComparesAcrossProcesses(t *testing.T) {
	if os.Getenv("FAULTS_PRINT_MONO") == "1" {
		os.Stdout.WriteString(strconv.FormatInt(Mono(), 10) + "\n")
		return
	}
	before := Mono()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMonoComparesAcrossProcesses$")
	cmd.Env = append(os.Environ(), "FAULTS_PRINT_MONO=1")
	out, err := cmd.Output()
	after := Mono()
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.ParseInt(strings.Fields(string(out))[0], 10, 64)
	if err != nil {
		t.Fatalf("child printed %q: %v", out, err)
	}
	if child < before || child > after {
		t.Fatalf("child's CLOCK_MONOTONIC %d outside the parent's [%d, %d]", child, before, after)
	}
}

func TestReadJournalIgnoresATornLastLine(t *testing.T) {
	path := t.TempDir() + "/j.jsonl"
	j, err := CreateJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append(WriteRecord{Cand: "a", Token: 1}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"cand":"b","tok`)
	f.Close()
	recs, err := ReadJournal[WriteRecord](path)
	if err != nil || len(recs) != 1 || recs[0].Cand != "a" {
		t.Fatalf("read %+v, %v", recs, err)
	}
}
