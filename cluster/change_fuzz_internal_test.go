package cluster

import (
	"errors"
	"math"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/wire"
)

// FuzzUnpackChange: a live change from the network decodes through the
// codec's checked path (a named error, never a panic), and the settings it
// carries are accepted by engine.InputFromWire only when they build a
// mailbox within MaxWireCapacity.
func FuzzUnpackChange(f *testing.F) {
	c := hostileCodec(f, nil)
	for _, in := range []*wire.Input{
		{Policy: "block", Capacity: 64},
		{Policy: "sample", Capacity: 128, SampleEvery: 4, HighWater: 96},
		{Policy: "throttle", Capacity: 8, Rate: math.Inf(1)},
		{Policy: "spill", Capacity: 1 << 30},
		nil,
	} {
		good, err := msgpack.Marshal(&wire.Change{Job: "j", JobAddress: "127.0.0.1:2", JobID: "job", Gen: 1, ID: 7, Phase: "prepare", Task: 2, Op: "count", Input: in})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(good)
	}
	gate, _ := msgpack.Marshal(&wire.Gate{Out: 1, Credited: true, Window: 256, Epoch: 3})
	f.Add(gate)
	f.Add([]byte{0x81, 0xa5, 'I', 'n', 'p', 'u', 't', 0xdf, 0xff, 0xff, 0xff, 0xff}) // a huge map header
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, url := range []string{opURL + "change", opURL + "gate"} {
			v, err := c.unpack(&anypb.Any{TypeUrl: url, Value: data})
			if err != nil {
				if !errors.Is(err, ErrUndecodable) {
					t.Fatalf("unpack = %v, want ErrUndecodable", err)
				}
				continue
			}
			m, ok := v.(*wire.Change)
			if !ok || m.Input == nil {
				continue
			}
			cfg, err := engine.InputFromWire(*m.Input)
			if err != nil {
				if !errors.Is(err, engine.ErrBadInput) {
					t.Fatalf("InputFromWire = %v, want ErrBadInput", err)
				}
				continue
			}
			if err := cfg.Validate(); err != nil || cfg.Capacity > engine.MaxWireCapacity {
				t.Fatalf("accepted %+v: %v", cfg, err)
			}
		}
	})
}
