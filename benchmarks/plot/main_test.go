package main

import (
	"strings"
	"testing"
)

func TestDrawsEveryQueryWithItsRatio(t *testing.T) {
	in := `{"name":"nexmark/generator","value":1600000,"unit":"events/s/core"}
{"name":"nexmark/q0","value":1000000,"unit":"events/s/core","baseline":"flink-1.11/q0","baseline_value":235000,"ratio":4.25}
{"name":"nexmark/q6","value":490000,"unit":"events/s/core"}
{"name":"pipeline/loop","value":1}
`
	bars, err := read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(bars) != 2 || bars[0].query != "q0" || bars[1].query != "q6" || bars[1].flink != 0 {
		t.Fatalf("bars %+v", bars)
	}
	svg := draw(bars, "t")
	for _, want := range []string{"<svg", "q0 (4.3×)", ">q6<", "q0 sluice: 1 M events/s per core", "q0 Flink 1.11: 235 K"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the chart lacks %q", want)
		}
	}
	if _, err := read(strings.NewReader("{bad\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad input: %v", err)
	}
}
