package main

import (
	"fmt"
	"math"
	"strings"
)

// svg draws the charted rows' ratios Conclave/Choria as horizontal bars
// from 1 on a logarithmic axis: a bar to the left of 1 means Conclave's
// number is lower. Green bars are measures where Conclave does better,
// orange ones where it does worse, grey ones where the two are within 1%.
func (r *results) svg() string {
	type bar struct {
		label  string
		ratio  float64
		better bool
		even   bool // within 1% of parity
	}
	var bars []bar
	lo, hi := 1.0, 1.0
	for _, row := range r.rows() {
		if row.chart == "" {
			continue
		}
		v := row.ratio()
		b := bar{label: row.chart, ratio: v}
		if v > 0 && !math.IsInf(v, 0) {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
			b.better = (v < 1) != row.higherIsBetter
			b.even = math.Abs(math.Log10(v)) < math.Log10(1.01)
		} else {
			b.ratio = math.NaN()
		}
		bars = append(bars, b)
	}
	loExp, hiExp := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if hiExp == loExp {
		hiExp++
	}
	const (
		width, left, plotW = 980.0, 290.0, 560.0
		top, rowH          = 78.0, 26.0
	)
	height := top + rowH*float64(len(bars)) + 56
	x := func(v float64) float64 { return left + (math.Log10(v)-loExp)/(hiExp-loExp)*plotW }

	var s strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&s, format, a...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="Helvetica, Arial, sans-serif" font-size="13">`+"\n", width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%.0f" y="26" font-size="17" font-weight="bold">Conclave / Choria: ratio per measure (log scale)</text>`+"\n", 16.0)
	p(`<text x="%.0f" y="48" fill="#555">%s</text>`+"\n", 16.0, xmlEscape(r.subtitle()))
	p(`<text x="%.0f" y="66" fill="#555">Left of 1: Conclave&#8217;s number is lower. Green: Conclave better; orange: Conclave worse; grey: even.</text>`+"\n", 16.0)
	bottom := top + rowH*float64(len(bars))
	for e := loExp; e <= hiExp; e++ {
		v := math.Pow(10, e)
		xx := x(v)
		stroke, w := "#ddd", 1.0
		if e == 0 {
			stroke, w = "#333", 1.5
		}
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"/>`+"\n", xx, top-6, xx, bottom+4, stroke, w)
		p(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#333">%s×</text>`+"\n", xx, bottom+22, decade(e))
	}
	p(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">Conclave/Choria</text>`+"\n", left+plotW/2, bottom+44)
	for i, b := range bars {
		y := top + rowH*float64(i)
		p(`<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-10, y+rowH/2+4, xmlEscape(b.label))
		if math.IsNaN(b.ratio) {
			p(`<text x="%.1f" y="%.1f" fill="#555">n/a</text>`+"\n", left+plotW+12, y+rowH/2+4)
			continue
		}
		x0, x1 := x(1), x(b.ratio)
		if x1 < x0 {
			x0, x1 = x1, x0
		}
		fill := "#e8710a"
		switch {
		case b.even:
			fill = "#9e9e9e"
		case b.better:
			fill = "#2e7d32"
		}
		p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x0, y+4, math.Max(x1-x0, 1), rowH-8, fill)
		p(`<text x="%.1f" y="%.1f">%s×</text>`+"\n", left+plotW+12, y+rowH/2+4, fmtRatio(b.ratio))
	}
	p("</svg>\n")
	return s.String()
}

func (r *results) subtitle() string {
	mode := "full run"
	if r.cfg.quick {
		mode = "quick run"
	}
	return fmt.Sprintf("TTL %v, nats-server %s (SyncAlways), go-choria %s, %s, %d CPUs, %s",
		r.cfg.ttl, r.versions["github.com/nats-io/nats-server/v2"], r.versions["github.com/choria-io/go-choria"],
		r.started.Format("2006-01-02"), numCPU(), mode)
}

// decade labels 10^e the way a reader expects: 0.001, 0.1, 1, 10, 1000.
func decade(e float64) string {
	if e < 0 {
		return strings.TrimRight(fmt.Sprintf("%.*f", int(-e), math.Pow(10, e)), "0")
	}
	return fmt.Sprintf("%.0f", math.Pow(10, e))
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
