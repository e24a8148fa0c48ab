// Command plot draws the Nexmark results of a benchmark run as an SVG bar
// chart: sluice's events/s per core for each query next to Flink 1.11's
// published figure per core, on a logarithmic scale.
//
//	go run ./benchmarks -run nexmark -json > nexmark.jsonl
//	go run ./benchmarks/plot -in nexmark.jsonl -out benchmarks/nexmark.svg
//
// The input is the JSON lines of `go run ./benchmarks -json`; lines of other
// benchmarks are ignored, and for a query measured several times the last
// line counts.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

type result struct {
	Name          string  `json:"name"`
	Value         float64 `json:"value"`
	BaselineValue float64 `json:"baseline_value"`
}

type bar struct {
	query         string
	sluice, flink float64
}

func main() {
	in := flag.String("in", "", "JSON lines of `go run ./benchmarks -json` (default: stdin)")
	out := flag.String("out", "", "SVG file to write (default: stdout)")
	title := flag.String("title", "Nexmark: events/s per core, sluice vs Flink 1.11 (published)", "chart title")
	flag.Parse()
	if err := run(*in, *out, *title); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

func run(in, out, title string) error {
	r := io.Reader(os.Stdin)
	if in != "" {
		f, err := os.Open(in)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	bars, err := read(r)
	if err != nil {
		return err
	}
	if len(bars) == 0 {
		return fmt.Errorf("no nexmark/qN results in the input")
	}
	svg := draw(bars, title)
	if out == "" {
		_, err = io.WriteString(os.Stdout, svg)
		return err
	}
	return os.WriteFile(out, []byte(svg), 0o644)
}

func read(r io.Reader) ([]bar, error) {
	var bars []bar
	index := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || !strings.HasPrefix(text, "{") {
			continue
		}
		var res result
		if err := json.Unmarshal([]byte(text), &res); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		q, ok := strings.CutPrefix(res.Name, "nexmark/q")
		if !ok {
			continue
		}
		b := bar{query: "q" + q, sluice: res.Value, flink: res.BaselineValue}
		if i, seen := index[b.query]; seen {
			bars[i] = b
			continue
		}
		index[b.query] = len(bars)
		bars = append(bars, b)
	}
	return bars, sc.Err()
}

// draw renders grouped bars on a log10 axis from 1 K to the next power of
// ten above the largest value.
func draw(bars []bar, title string) string {
	const (
		width, height           = 900, 420
		left, right, top, foot  = 70, 20, 50, 60
		barW, gap               = 22, 4
		sluiceColor, flinkColor = "#2b7bb9", "#e08a2c"
	)
	hi := 1.0
	for _, b := range bars {
		hi = math.Max(hi, math.Max(b.sluice, b.flink))
	}
	lo, top10 := 3.0, math.Ceil(math.Log10(hi))
	plotH := float64(height - top - foot)
	y := func(v float64) float64 {
		if v <= 0 {
			return float64(height - foot)
		}
		f := (math.Log10(v) - lo) / (top10 - lo)
		return float64(height-foot) - math.Max(0, f)*plotH
	}
	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&s, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&s, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", left, escape(title))
	for p := lo; p <= top10; p++ {
		yy := y(math.Pow(10, p))
		fmt.Fprintf(&s, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, width-right, yy, yy)
		fmt.Fprintf(&s, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, yy+4, human(math.Pow(10, p)))
	}
	group := float64(width-left-right) / float64(len(bars))
	for i, b := range bars {
		x := float64(left) + group*float64(i) + group/2 - barW - gap/2
		for j, v := range []float64{b.sluice, b.flink} {
			color := sluiceColor
			if j == 1 {
				color = flinkColor
			}
			bx := x + float64(j)*(barW+gap)
			if v > 0 {
				fmt.Fprintf(&s, `<rect x="%.1f" y="%.1f" width="%d" height="%.1f" fill="%s"><title>%s %s: %s events/s per core</title></rect>`+"\n",
					bx, y(v), barW, float64(height-foot)-y(v), color, b.query, []string{"sluice", "Flink 1.11"}[j], human(v))
			}
		}
		label := b.query
		if b.flink > 0 {
			label = fmt.Sprintf("%s (%.1f×)", b.query, b.sluice/b.flink)
		}
		fmt.Fprintf(&s, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x+barW+gap/2, height-foot+18, escape(label))
	}
	fmt.Fprintf(&s, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">sluice (2 cores, generator in process)</text>`+"\n",
		left, height-22, sluiceColor, left+18, height-12)
	fmt.Fprintf(&s, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">Flink 1.11, published (3 × 8 cores); q6: no figure</text>`+"\n",
		left+300, height-22, flinkColor, left+318, height-12)
	s.WriteString("</svg>\n")
	return s.String()
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.3g M", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3g K", v/1e3)
	}
	return fmt.Sprintf("%.3g", v)
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
