package faults

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Timeline drawing constants, in pixels.
const (
	svgWidth   = 1280
	svgLeft    = 150 // lane labels
	svgRight   = 20
	svgLane    = 14
	svgLaneGap = 3
	svgHeader  = 58 // title and fault labels
	svgAxis    = 28
)

// faultCodes are the short labels of fault markers.
var faultCodes = map[Kind]string{
	KillLeader: "K", StopLeader: "ST", PauseLeader: "P", PauseMidWrite: "PW", CutCandidate: "C", DelayLink: "D",
	FlapLink: "F", StandDown: "S", HandOver: "H", HandOverCut: "HC", PriorityMove: "PM", RestartBroker: "B", KillStreamLeader: "NL", KillFollower: "NF",
	RestartCluster: "R", TTLLower: "T-", TTLRaise: "T+", RestartAll: "RA", KillAll: "KA", RefuseConsumers: "RC",
	Purge: "PG", Double: "2",
}

var faultColours = map[Kind]string{
	KillLeader: "#d62728", StopLeader: "#7f7f7f", PauseLeader: "#9467bd", PauseMidWrite: "#8c564b", CutCandidate: "#e377c2",
	DelayLink: "#bcbd22", FlapLink: "#17becf", StandDown: "#ff7f0e", HandOver: "#2ca02c", HandOverCut: "#98df8a",
	PriorityMove: "#c5b0d5", RestartBroker: "#111111",
	KillStreamLeader: "#111111", KillFollower: "#555555", RestartCluster: "#111111",
	TTLLower: "#2ca02c", TTLRaise: "#1f77b4", RestartAll: "#7f7f7f", KillAll: "#d62728", RefuseConsumers: "#aec7e8",
	Purge: "#ffbb78", Double: "#000000",
}

// WriteTimeline draws the runs as an SVG timeline, one panel per run: a lane
// per candidate (its successive processes share it) with a bar per term, a
// top lane with every term so that overlaps would show, the faults as
// vertical lines with their span shaded, the times no quorum was reachable
// hatched, rejected writes as red marks and process deaths as black ticks.
func WriteTimeline(w io.Writer, results []*Result) error {
	var body bytes.Buffer
	y := 0
	for _, res := range results {
		y += drawPanel(&body, res, y)
	}
	legendTop := y + 6
	y = legendTop + drawLegend(&body, legendTop)
	var out bytes.Buffer
	fmt.Fprintf(&out, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", svgWidth, y, svgWidth, y)
	out.WriteString(`<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="6" stroke="#999" stroke-width="2"/></pattern>` +
		`<pattern id="stopped" width="4" height="4" patternUnits="userSpaceOnUse"><rect width="4" height="4" fill="#fff"/><circle cx="2" cy="2" r="0.9" fill="#666"/></pattern></defs>` + "\n")
	fmt.Fprintf(&out, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", svgWidth, y)
	out.Write(body.Bytes())
	out.WriteString("</svg>\n")
	_, err := w.Write(out.Bytes())
	return err
}

// lane is one row of a panel.
type lane struct {
	key, label string
	host       int
	worker     int
}

func drawPanel(b *bytes.Buffer, res *Result, top int) int {
	h, rep := res.History, res.Report
	var start, stop int64
	for _, e := range h.Events {
		switch e.Ev {
		case HvRunStart:
			start = e.At
		case HvRunStop:
			stop = e.At
		}
	}
	if stop <= start {
		return 0
	}
	lanes := lanesOf(res)
	plotW := float64(svgWidth - svgLeft - svgRight)
	scale := plotW / float64(stop-start)
	x := func(t int64) float64 {
		return svgLeft + math.Max(0, math.Min(plotW, float64(t-start)*scale))
	}
	laneY := func(i int) int { return top + svgHeader + i*(svgLane+svgLaneGap) }
	index := map[string]int{}
	for i, l := range lanes {
		index[l.key] = i + 1 // lane 0 is "all terms"
	}
	bottom := laneY(len(lanes)+1) - svgLaneGap

	verdict := "PASS"
	if !rep.OK() {
		verdict = fmt.Sprintf("FAIL: %d violations", len(rep.Violations))
	}
	faults := 0
	for _, n := range rep.Faults {
		faults += n
	}
	title := fmt.Sprintf("%s — TTL %v, %d faults, %d terms, %d elections, %d overlaps, worst leaderless gap %v (allowed %v), stale writes rejected: %d — %s",
		panelName(res), res.Config.TTL, faults, len(rep.Spans), rep.Elections, rep.Overlaps, rep.WorstGap.Counted.Round(time.Millisecond), rep.Allowed, rep.StaleRejected, verdict)
	fmt.Fprintf(b, `<text x="8" y="%d" font-size="13" font-weight="bold">%s</text>`+"\n", top+16, esc(title))

	// Lane backgrounds and labels.
	for i := 0; i <= len(lanes); i++ {
		fill := "#f4f4f4"
		label := "all terms"
		if i > 0 {
			label = lanes[i-1].label
			if lanes[i-1].host%2 == 1 {
				fill = "#ececec"
			}
		} else {
			fill = "#e4e9f0"
		}
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`, svgLeft, laneY(i), plotW, svgLane, fill)
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", svgLeft-6, laneY(i)+svgLane-3, esc(label))
	}

	// Times no quorum was reachable, hatched.
	c := newChecker(h, &Report{Faults: map[Kind]int{}})
	for _, iv := range c.unavailable() {
		x0, x1 := x(iv.from), x(min(iv.to, stop))
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="url(#hatch)" opacity="0.6"><title>no quorum reachable for %v</title></rect>`+"\n",
			x0, laneY(0), math.Max(1, x1-x0), bottom-laneY(0), time.Duration(iv.to-iv.from).Round(time.Millisecond))
	}

	// Fault spans and lines.
	var begins []HarnessEvent
	for i, e := range c.events {
		if e.Ev != HvFaultBegin {
			continue
		}
		begins = append(begins, e)
		end := stop
		for _, f := range c.events[i+1:] {
			if f.Ev == HvFaultEnd && f.Kind == e.Kind {
				end = f.At
				break
			}
		}
		col := faultColours[Kind(e.Kind)]
		x0, x1 := x(e.At), x(end)
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" opacity="0.10"/>`, x0, laneY(0), math.Max(1, x1-x0), bottom-laneY(0), col)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="1.2" stroke-dasharray="3,2"><title>%s %s at +%.2fs</title></line>`+"\n",
			x0, top+22, x0, bottom, col, esc(e.Kind), esc(e.Target), float64(e.At-start)/1e9)
	}
	lastX := []float64{-100, -100, -100}
	for _, e := range begins {
		x0 := x(e.At)
		for row := range lastX {
			if x0-lastX[row] >= 16 || row == len(lastX)-1 {
				lastX[row] = x0
				fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="%s" font-weight="bold" font-size="10">%s<title>%s %s</title></text>`+"\n",
					x0, top+30+row*10, faultColours[Kind(e.Kind)], faultCodes[Kind(e.Kind)], esc(e.Kind), esc(e.Target))
				break
			}
		}
	}

	// Stopped processes: dotted over their workers' lanes.
	for proc, ivs := range c.stopped {
		for _, l := range lanes {
			if !strings.HasPrefix(l.key, HostOf(proc)+".") {
				continue
			}
			for _, iv := range ivs {
				x0, x1 := x(iv.from), x(min(iv.to, stop))
				fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="url(#stopped)"><title>%s stopped</title></rect>`, x0, laneY(index[l.key]), math.Max(1, x1-x0), svgLane, esc(proc))
			}
		}
	}
	b.WriteString("\n")

	// Terms.
	for _, s := range rep.Spans {
		i, ok := index[slotOf(s.Cand)]
		if !ok {
			continue
		}
		col := laneColour(lanes[i-1])
		x0, x1 := x(s.Start), x(s.End)
		tip := esc(fmt.Sprintf("%s (%s) token %d: +%.3fs to +%.3fs (%.3fs), ended: %s", s.Cand, s.Identity, s.Token,
			float64(s.Start-start)/1e9, float64(s.End-start)/1e9, float64(s.End-s.Start)/1e9, s.Ended))
		for _, li := range []int{0, i} {
			fmt.Fprintf(b, `<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s" stroke="#333" stroke-width="0.4"><title>%s</title></rect>`,
				x0, laneY(li)+1, math.Max(0.8, x1-x0), svgLane-2, col, tip)
		}
		b.WriteString("\n")
	}

	// Process deaths.
	for _, e := range c.events {
		if e.Ev != HvProcExit || e.At > stop {
			continue // the exits after the end are the clean shutdown
		}
		for _, l := range lanes {
			if strings.HasPrefix(l.key, HostOf(e.Target)+".") {
				y0 := laneY(index[l.key])
				fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#000" stroke-width="2"><title>%s exited (%s)</title></line>`, x(e.At), y0, x(e.At), y0+svgLane, esc(e.Target), esc(e.Detail))
			}
		}
	}
	b.WriteString("\n")

	// Rejected writes.
	for _, wr := range h.Writes {
		if wr.Verdict != Rejected {
			continue
		}
		i, ok := index[slotOf(wr.Cand)]
		if !ok {
			continue
		}
		cx, cy := x(wr.At), float64(laneY(i))+svgLane/2
		fmt.Fprintf(b, `<path d="M%.1f %.1f l6 -6 m-6 0 l6 6" transform="translate(-3 3)" stroke="#e00" stroke-width="2"><title>%s</title></path>`+"\n", cx, cy,
			esc(fmt.Sprintf("write %s#%d with token %d rejected at +%.3fs (highest %d), checked valid at +%.3fs", wr.Cand, wr.Seq, wr.Token, float64(wr.At-start)/1e9, wr.Highest, float64(wr.Checked-start)/1e9)))
	}

	// Time axis.
	secs := float64(stop-start) / 1e9
	step := 1.0
	for _, s := range []float64{1, 2, 5, 10, 15, 30, 60, 120, 300} {
		step = s
		if plotW/secs*s >= 55 {
			break
		}
	}
	ay := bottom + 4
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`, svgLeft, ay, svgLeft+plotW, ay)
	for t := 0.0; t <= secs; t += step {
		tx := svgLeft + t*1e9*scale
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/><text x="%.1f" y="%d" text-anchor="middle">%ss</text>`, tx, ay, tx, ay+4, tx, ay+15, strconv.FormatFloat(t, 'f', -1, 64))
	}
	b.WriteString("\n")
	return bottom - top + svgAxis
}

func panelName(res *Result) string {
	if res.Config.Mode == Cluster {
		return "3-node cluster (R3)"
	}
	return "single broker"
}

// lanesOf returns a lane per candidate slot (host and worker), in order:
// every candidate of the run, whether it ever led or not.
func lanesOf(res *Result) []lane {
	identity := map[string]string{}
	for _, r := range res.History.Candidates {
		if r.Ev == EvStart {
			identity[HostOf(r.Proc)] = r.Identity
		}
	}
	var lanes []lane
	for h := 1; h <= res.Config.Hosts; h++ {
		for w := range res.Config.Workers {
			key := fmt.Sprintf("h%d.w%d", h, w)
			lanes = append(lanes, lane{key: key, label: fmt.Sprintf("%s (%s)", key, identity[fmt.Sprintf("h%d", h)]), host: h, worker: w})
		}
	}
	return lanes
}

// slotOf returns the lane of a candidate: h1.w0 for h1.2.w0.
func slotOf(cand string) string {
	return HostOf(cand) + cand[strings.LastIndex(cand, ".w"):]
}

// laneColour gives each host a hue and each of its workers a shade of it.
func laneColour(l lane) string {
	hues := []int{210, 30, 120, 280, 0, 180, 60, 330}
	hue := hues[(l.host-1+len(hues))%len(hues)]
	light := 38 + (l.worker%4)*12
	return fmt.Sprintf("hsl(%d,70%%,%d%%)", hue, light)
}

func drawLegend(b *bytes.Buffer, top int) int {
	x := 8
	y := top + 12
	item := func(w int, draw string, label string) {
		fmt.Fprintf(b, draw, x, y)
		fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`, x+w+4, y+4, esc(label))
		x += w + 16 + 6*len(label)
		if x > svgWidth-260 {
			x = 8
			y += 16
		}
	}
	for _, k := range AllKinds() {
		item(9*len(faultCodes[k])+2, `<text x="%d" y="%d" dy="4" font-weight="bold" fill="`+faultColours[k]+`">`+faultCodes[k]+`</text>`, string(k))
	}
	item(10, `<rect x="%d" y="%d" transform="translate(0 -5)" width="10" height="10" fill="url(#hatch)"/>`, "no quorum reachable (not counted)")
	item(10, `<rect x="%d" y="%d" transform="translate(0 -5)" width="10" height="10" fill="url(#stopped)" stroke="#999"/>`, "process stopped (SIGSTOP)")
	item(6, `<path d="M%d %d l6 -6 m-6 0 l6 6" transform="translate(0 3)" stroke="#e00" stroke-width="2"/>`, "write rejected by the fence")
	item(2, `<rect x="%d" y="%d" transform="translate(0 -6)" width="2" height="12" fill="#000"/>`, "process died")
	fmt.Fprintf(b, "\n")
	return y - top + 12
}

func esc(s string) string {
	var buf bytes.Buffer
	_ = xml.EscapeText(&buf, []byte(s))
	return buf.String()
}
