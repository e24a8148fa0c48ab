// Package clusterwordcount is the sample that counts words across a
// cluster: one topology whose counting instances are spread over several
// processes (package cluster), with checkpoints replicated to the other
// nodes, so that the job goes on when a node dies.
//
//	lines (source) -> split (flatmap) ==hash by word, across nodes==> count x P -> out (file sink)
//
// The source and the sink run on the coordinator (the node that calls
// cluster.Run); the counters go to every node by rendezvous hashing. The
// text is generated deterministically from the line number, so a source
// rewound to a checkpoint reads the same words again; Want counts them with
// a plain loop, for comparison.
//
// Every node must have the job (the same binary): give cluster.Config.Jobs
// the result of Jobs. `sluice cluster-wordcount --nodes 3` starts the
// nodes as local processes and runs it.
package clusterwordcount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/operators"
)

// Job is the name the topology is registered under.
const Job = "cluster-wordcount"

// Options of the job. Only the coordinator's matter for what is read and
// written; every node must use the same Parallelism.
type Options struct {
	Lines       int64  // lines of generated text
	Parallelism int    // counting instances
	Dir         string // where the coordinator writes the counts ("counts")
	Checkpoint  time.Duration
}

func (o Options) withDefaults() Options {
	if o.Lines == 0 {
		o.Lines = 200_000
	}
	if o.Parallelism == 0 {
		o.Parallelism = 6
	}
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	if o.Checkpoint == 0 {
		o.Checkpoint = 200 * time.Millisecond
	}
	return o
}

var vocabulary = strings.Fields(`the quick brown fox jumps over a lazy dog while seven
	stream operators count every word that flows through the cluster and each
	node keeps its share of the keys until the end of the text`)

// Line returns line i of the generated text.
func Line(i int64) string {
	n := 3 + int(i%5)
	words := make([]string, n)
	for k := range n {
		h := uint64(i)*0x9E3779B97F4A7C15 + uint64(k)*0xBF58476D1CE4E5B9
		h ^= h >> 31
		words[k] = vocabulary[h%uint64(len(vocabulary))]
	}
	return strings.Join(words, " ")
}

// Topology builds the job.
func Topology(o Options) *operators.Topology {
	o = o.withDefaults()
	t := operators.NewTopology(Job, operators.Checkpoints(o.Checkpoint))
	lines := operators.Source(t, "lines", operators.Generate(o.Lines, Line))
	words := operators.FlatMap(lines, "split", strings.Fields)
	by := operators.KeyBy(words, "by-word", func(w string) string { return w }, operators.Parallelism(o.Parallelism))
	counts := operators.Count(by, "count", operators.Emit(operators.EmitAtEnd))
	operators.Sink(counts, "out", operators.File(filepath.Join(o.Dir, "counts"), func(kv operators.KV[string, int64]) string {
		return kv.Key + " " + strconv.FormatInt(kv.Value, 10)
	}), operators.Parallelism(1))
	return t
}

// Jobs registers the job for cluster.Config.Jobs.
func Jobs(o Options) cluster.Jobs {
	return cluster.Jobs{Job: func() *operators.Topology { return Topology(o) }}
}

// Want counts the words of the generated text with a plain loop.
func Want(lines int64) map[string]int64 {
	m := map[string]int64{}
	for i := range lines {
		for _, w := range strings.Fields(Line(i)) {
			m[w]++
		}
	}
	return m
}

// Result reads the counts the job wrote into dir.
func Result(dir string) (map[string]int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, "counts"))
	if err != nil {
		return nil, err
	}
	m := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		w, c, ok := strings.Cut(line, " ")
		n, err := strconv.ParseInt(c, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("clusterwordcount: bad line %q in %s", line, dir)
		}
		if _, dup := m[w]; dup {
			return nil, fmt.Errorf("clusterwordcount: %q counted twice", w)
		}
		m[w] = n
	}
	return m, nil
}

// Compare returns nil when got equals want, else an error naming the
// differences.
func Compare(got, want map[string]int64) error {
	var diffs []string
	for w, n := range want {
		if got[w] != n {
			diffs = append(diffs, fmt.Sprintf("%s: %d, want %d", w, got[w], n))
		}
	}
	for w, n := range got {
		if _, ok := want[w]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: %d, want none", w, n))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	sort.Strings(diffs)
	return errors.New("clusterwordcount: counts differ from the plain loop's: " + strings.Join(diffs, "; "))
}
