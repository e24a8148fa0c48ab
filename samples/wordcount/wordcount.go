// Package wordcount is the sample that counts the words of a text: the lines
// of a file, or a deterministic generated text, split into words, keyed by
// word over several instances, counted, and reported as the top N words.
//
//	lines (source) -> split (flatmap) ==hash by word==> count x P -> collect (sink)
package wordcount

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"unicode"

	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/samples/internal/collect"
)

// Sample is the wordcount program. Create it with New.
type Sample struct {
	input       string
	lines       int64
	seed        uint64
	top         int
	parallelism int

	result *collect.Sink[operators.KV[string, int64]]
}

// New returns the sample with its default options.
func New() *Sample {
	return &Sample{lines: 200_000, seed: 1, top: 10, parallelism: 4}
}

// Name implements samples.Sample.
func (s *Sample) Name() string { return "wordcount" }

// Description implements samples.Sample.
func (s *Sample) Description() string {
	return "count the words of a text (a file, or a generated text) and print the most frequent"
}

// Flags implements samples.Sample.
func (s *Sample) Flags(fs *flag.FlagSet) {
	fs.StringVar(&s.input, "input", s.input, "text file to count (default: a generated text)")
	fs.Int64Var(&s.lines, "lines", s.lines, "lines of generated text")
	fs.Uint64Var(&s.seed, "seed", s.seed, "seed of the generated text")
	fs.IntVar(&s.top, "top", s.top, "how many of the most frequent words to print")
	fs.IntVar(&s.parallelism, "parallelism", s.parallelism, "instances of the counting operator")
}

// Configure sets the options without flags (for tests and embedding).
func (s *Sample) Configure(input string, lines int64, seed uint64, top, parallelism int) {
	s.input, s.lines, s.seed, s.top, s.parallelism = input, lines, seed, top, parallelism
}

// Topology implements samples.Sample.
func (s *Sample) Topology() (*operators.Topology, error) {
	if s.lines < 0 || s.top < 0 {
		return nil, fmt.Errorf("wordcount: -lines and -top must not be negative")
	}
	t := operators.NewTopology("wordcount")
	var src operators.SourceConnector[string]
	if s.input != "" {
		src = operators.FileLines(s.input)
	} else {
		seed := s.seed
		src = operators.Generate(s.lines, func(i int64) string { return Line(seed, i) })
	}
	lines := operators.Source(t, "lines", src)
	words := operators.FlatMap(lines, "split", Words)
	byWord := operators.KeyBy(words, "by-word", func(w string) string { return w }, operators.Parallelism(s.parallelism))
	counts := operators.Count(byWord, "count", operators.Emit(operators.EmitAtEnd))
	s.result = collect.New[operators.KV[string, int64]]()
	operators.Sink(counts, "collect", s.result)
	return t, nil
}

// Counts returns the final count of every word, most frequent first (ties
// by word), once the topology has finished.
func (s *Sample) Counts() []operators.KV[string, int64] {
	if s.result == nil {
		return nil
	}
	kvs := s.result.Items()
	slices.SortFunc(kvs, func(a, b operators.KV[string, int64]) int {
		if c := cmp.Compare(b.Value, a.Value); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return kvs
}

// Report implements samples.Sample: the top words and the totals.
func (s *Sample) Report(w io.Writer) error {
	kvs := s.Counts()
	var total int64
	for _, kv := range kvs {
		total += kv.Value
	}
	fmt.Fprintf(w, "%d words, %d distinct; top %d:\n", total, len(kvs), min(s.top, len(kvs)))
	for i, kv := range kvs[:min(s.top, len(kvs))] {
		fmt.Fprintf(w, "%4d  %-16s %d\n", i+1, kv.Key, kv.Value)
	}
	return nil
}

// Words splits a line into lower-case words, dropping punctuation at their
// ends.
func Words(line string) []string {
	fields := strings.Fields(line)
	out := fields[:0]
	for _, f := range fields {
		f = strings.TrimFunc(f, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
		if f != "" {
			out = append(out, strings.ToLower(f))
		}
	}
	return out
}

var syllables = []string{"ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ve", "da", "shi", "ru", "en", "or", "al", "is"}

// vocabulary is 4096 distinct pseudo-words made of two or three syllables.
var vocabulary = func() []string {
	seen := make(map[string]bool)
	var words []string
	for i := 0; len(words) < 4096; i++ {
		a, b, c := i%16, (i/16)%16, (i/256)%17
		w := syllables[a] + syllables[b]
		if c < 16 {
			w += syllables[c]
		}
		if !seen[w] {
			seen[w] = true
			words = append(words, w)
		}
	}
	return words
}()

// Line returns line i of the generated text for seed: 6 to 14 words drawn
// with a Zipf distribution over a fixed vocabulary. It depends only on seed
// and i, so any line can be regenerated (a replayable source).
func Line(seed uint64, i int64) string {
	r := rand.New(rand.NewPCG(seed, uint64(i)))
	z := rand.NewZipf(r, 1.2, 1, uint64(len(vocabulary)-1))
	n := 6 + r.IntN(9)
	var b strings.Builder
	for k := range n {
		if k > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocabulary[z.Uint64()])
	}
	return b.String()
}
