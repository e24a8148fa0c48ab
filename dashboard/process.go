package dashboard

import (
	"math"
	"runtime"
	"runtime/metrics"
	"time"
)

// Process is the dashboard's own process, read from runtime/metrics at
// every snapshot: memory, garbage collection, goroutines and CPU.
type Process struct {
	HeapBytes  uint64 `json:"heap_bytes"`  // live and not yet swept heap objects
	TotalBytes uint64 `json:"total_bytes"` // all memory mapped by the Go runtime
	Goroutines uint64 `json:"goroutines"`
	GCCycles   uint64 `json:"gc_cycles"`
	// GCPauseP99MS is the 99th percentile of the stop-the-world pauses
	// of garbage collection since the process started.
	GCPauseP99MS float64 `json:"gc_pause_p99_ms"`
	// CPU is the cores the process used over the last interval (user and
	// GC time estimated by the runtime; 1.0 is one core busy), GCCPU the
	// share of that spent collecting garbage; -1 without a previous reading.
	CPU        float64 `json:"cpu"`
	GCCPU      float64 `json:"gc_cpu"`
	GOMAXPROCS int     `json:"gomaxprocs"`
}

// The runtime/metrics read, by index in procReader.samples.
var procMetrics = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/total:bytes",
	"/sched/goroutines:goroutines",
	"/gc/cycles/total:gc-cycles",
	"/sched/pauses/total/gc:seconds",
	"/cpu/classes/total:cpu-seconds",
	"/cpu/classes/idle:cpu-seconds",
	"/cpu/classes/gc/total:cpu-seconds",
}

// procReader reads the process's figures; owned by the dashboard's
// polling goroutine (no global state: each dashboard has its own).
type procReader struct {
	samples []metrics.Sample
	prevAt  time.Time
	prevCPU float64 // busy CPU seconds (total - idle) at prevAt
	prevGC  float64
}

func newProcReader() *procReader {
	r := &procReader{samples: make([]metrics.Sample, len(procMetrics))}
	for i, name := range procMetrics {
		r.samples[i].Name = name
	}
	return r
}

func u64(s metrics.Sample) uint64 {
	if s.Value.Kind() == metrics.KindUint64 {
		return s.Value.Uint64()
	}
	return 0
}

func f64(s metrics.Sample) float64 {
	if s.Value.Kind() == metrics.KindFloat64 {
		return s.Value.Float64()
	}
	return 0
}

// read takes one reading at now.
func (r *procReader) read(now time.Time) Process {
	metrics.Read(r.samples)
	p := Process{
		HeapBytes: u64(r.samples[0]), TotalBytes: u64(r.samples[1]), Goroutines: u64(r.samples[2]),
		GCCycles: u64(r.samples[3]), CPU: -1, GCCPU: -1, GOMAXPROCS: runtime.GOMAXPROCS(0),
	}
	if s := r.samples[4]; s.Value.Kind() == metrics.KindFloat64Histogram {
		p.GCPauseP99MS = round3(1000 * quantile(s.Value.Float64Histogram(), 0.99))
	}
	busy := f64(r.samples[5]) - f64(r.samples[6])
	gc := f64(r.samples[7])
	if !r.prevAt.IsZero() {
		if dt := now.Sub(r.prevAt).Seconds(); dt > 0 {
			p.CPU = round3(max(busy-r.prevCPU, 0) / dt)
			if d := busy - r.prevCPU; d > 0 {
				p.GCCPU = round3(min(max(gc-r.prevGC, 0)/d, 1))
			} else {
				p.GCCPU = 0
			}
		}
	}
	r.prevAt, r.prevCPU, r.prevGC = now, busy, gc
	return p
}

// quantile is the upper bound of the bucket where q of the histogram's
// counts lie below (0 for an empty one; the largest finite bound for the
// last, unbounded bucket).
func quantile(h *metrics.Float64Histogram, q float64) float64 {
	var total uint64
	for _, c := range h.Counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen >= want {
			hi := h.Buckets[i+1]
			if math.IsInf(hi, 1) {
				hi = h.Buckets[i]
			}
			return hi
		}
	}
	return h.Buckets[len(h.Buckets)-1]
}
