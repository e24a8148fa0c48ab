package samples

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/samples/bank"
	"github.com/sluicehq/sluice/samples/clickstream"
	"github.com/sluicehq/sluice/samples/fraud"
	"github.com/sluicehq/sluice/samples/jetstreamtopg"
	"github.com/sluicehq/sluice/samples/latency"
	"github.com/sluicehq/sluice/samples/nexmark"
	"github.com/sluicehq/sluice/samples/overload"
	"github.com/sluicehq/sluice/samples/wordcount"
)

// Sample is one runnable program.
type Sample interface {
	Name() string
	Description() string
	// Flags registers the sample's options on fs.
	Flags(fs *flag.FlagSet)
	// Topology builds the topology from the options parsed so far.
	Topology() (*operators.Topology, error)
	// Report writes the sample's result once its topology has finished.
	Report(w io.Writer) error
}

// NotResumable is implemented by the samples whose work does not happen in
// their topology (a driver that runs its own systems when its source
// opens): checkpoints of the topology could not resume that work, and
// `sluice run --checkpoints` refuses them with the reason NotResumable
// gives.
type NotResumable interface {
	NotResumable() string
}

// Observer is implemented by the samples whose Report reads the
// statistics of their run (actors.Run.Stats): the runner calls Observe
// with the run of the sample's topology as soon as it has started, before
// Report.
type Observer interface {
	Observe(run *actors.Run)
}

// Catalog returns a fresh instance of every sample, in listing order.
func Catalog() []Sample {
	return []Sample{
		wordcount.New(),
		nexmark.New(),
		jetstreamtopg.New(),
		bank.New(),
		clickstream.New(),
		fraud.New(),
		overload.New(),
		latency.New(),
	}
}

// Lookup returns a fresh instance of the sample called name, or an error that
// lists the valid names.
func Lookup(name string) (Sample, error) {
	var names []string
	for _, s := range Catalog() {
		if s.Name() == name {
			return s, nil
		}
		names = append(names, s.Name())
	}
	slices.Sort(names)
	return nil, fmt.Errorf("samples: no sample %q (valid: %s)", name, strings.Join(names, ", "))
}
