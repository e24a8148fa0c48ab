package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
)

// click is a realistic record between nodes: a time, a pointer, a map,
// a nested struct and a slice of structs.
type click struct {
	At      time.Time
	User    *clickUser
	Props   map[string]clickUser
	Session struct {
		ID    string
		Start time.Time
	}
	Path []clickStep
}

type clickUser struct {
	ID   string
	Seen time.Time
}

type clickStep struct {
	URL string
	At  time.Time
	Ms  [30]int64
}

func hostileCodec(t testing.TB, log *slog.Logger) *codec {
	t.Helper()
	r := NewRegistry()
	if err := Register[click](r, "web.Click"); err != nil {
		t.Fatal(err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c, err := newCodec(r, log, func(*actor.PID) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A nil where a time.Time belongs panicked msgpack v5.4.1 on protoactor's
// stream goroutine; now it is an undecodable message, counted, naming
// the field.
func TestUnpackNilTime(t *testing.T) {
	c := hostileCodec(t, nil)
	data := []byte{0x81, 0xa4, 'P', 'a', 't', 'h', 0x91, 0x81, 0xa2, 'A', 't', 0xc0}
	_, err := c.unpack(&anypb.Any{TypeUrl: msgpackURL + "web.Click", Value: data})
	if !errors.Is(err, ErrUndecodable) || !errors.Is(err, msgpacksafe.ErrMalformed) {
		t.Fatalf("unpack = %v, want ErrUndecodable wrapping msgpacksafe.ErrMalformed", err)
	}
	for _, want := range []string{"web.Click", ".Path[0].At", "time.Time", "byte 11"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if st := c.stats(); st.Undecodable != 1 || st.Unpacked != 0 {
		t.Fatalf("stats %+v, want 1 undecodable", st)
	}
	// The receiving middleware names the sender.
	_, err = c.unpackFrom(&anypb.Any{TypeUrl: msgpackURL + "web.Click", Value: data}, actor.NewPID("10.0.0.2:4000", "job"))
	if !strings.Contains(err.Error(), "from a remote message from 10.0.0.2:4000") {
		t.Fatalf("error %q does not name the sender", err)
	}
}

// A 1 MiB message of one-byte elements for the slice of structs allocated
// about 300 times its size; now it is refused having allocated little.
func TestUnpackHostileAllocation(t *testing.T) {
	c := hostileCodec(t, nil)
	const n = 1<<20 - 12
	data := []byte{0x81, 0xa4, 'P', 'a', 't', 'h', 0xdd, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(data[7:], n)
	data = append(data, bytes.Repeat([]byte{0x80}, n)...)
	a := &anypb.Any{TypeUrl: msgpackURL + "web.Click", Value: data}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := c.unpack(a)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, msgpacksafe.ErrTooLarge) {
		t.Fatalf("unpack = %v, want msgpacksafe.ErrTooLarge", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got >= 8<<20 {
		t.Fatalf("unpack of %d bytes allocated %d bytes, want < 8 MiB", len(data), got)
	} else {
		t.Logf("unpack of %d bytes allocated %d bytes: %v", len(data), got, err)
	}
}

func TestUnpackRealisticRoundTrip(t *testing.T) {
	c := hostileCodec(t, nil)
	in := click{At: time.Unix(10, 0).UTC(), User: &clickUser{ID: "u", Seen: time.Unix(5, 0).UTC()},
		Props: map[string]clickUser{"ref": {ID: "r"}}, Path: []clickStep{{URL: "/", At: time.Unix(11, 0).UTC()}}}
	in.Session.ID = "s"
	a, err := c.pack(in)
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.unpack(a)
	if err != nil {
		t.Fatal(err)
	}
	got := v.(click)
	if !got.At.Equal(in.At) || got.User.ID != "u" || got.Props["ref"].ID != "r" || got.Path[0].URL != "/" || got.Session.ID != "s" {
		t.Fatalf("unpack = %+v", got)
	}
}

// FuzzUnpackClick: messages of a realistic registered type never panic.
func FuzzUnpackClick(f *testing.F) {
	c := hostileCodec(f, nil)
	good, _ := msgpack.Marshal(click{At: time.Unix(1, 0), User: &clickUser{ID: "u"}, Path: []clickStep{{URL: "/"}}})
	f.Add(good)
	f.Add([]byte{0x81, 0xa4, 'P', 'a', 't', 'h', 0x91, 0x81, 0xa2, 'A', 't', 0xc0})                           // nil time.Time
	f.Add([]byte{0x81, 0xa4, 'P', 'a', 't', 'h', 0xdd, 0xff, 0xff, 0xff, 0xff, 0x80})                         // huge array header
	f.Add([]byte{0x81, 0xa5, 'P', 'r', 'o', 'p', 's', 0x81, 0xa1, 'x', 0x81, 0xa4, 'S', 'e', 'e', 'n', 0xc0}) // nil in a map value
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := c.unpack(&anypb.Any{TypeUrl: msgpackURL + "web.Click", Value: data})
		if err == nil {
			if _, ok := v.(click); !ok {
				t.Fatalf("unpack = %T", v)
			}
		} else if !errors.Is(err, ErrUndecodable) {
			t.Fatalf("unpack = %v, want ErrUndecodable", err)
		}
	})
}

// The warn-once memory holds at most warnKeys keys however many distinct
// type names peers send; past it one line says so and the rest count.
func TestWarnOnceCapped(t *testing.T) {
	var buf bytes.Buffer
	c := hostileCodec(t, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	c.warnKeys = 16
	for i := range 20_000 {
		c.warnOnce(fmt.Sprintf("sluice.msgpack/peer.T%d", i), "cluster: message dropped")
	}
	c.warnOnce("sluice.msgpack/peer.T3", "cluster: message dropped") // seen: debug only
	if len(c.warned) != 16 {
		t.Fatalf("warn-once map holds %d keys, want 16", len(c.warned))
	}
	if got := c.stats().WarningsUnkeyed; got != 20_000-16 {
		t.Fatalf("WarningsUnkeyed = %d, want %d", got, 20_000-16)
	}
	lines := strings.Count(buf.String(), "\n")
	if lines != 17 || strings.Count(buf.String(), "too many distinct warnings") != 1 {
		t.Fatalf("%d warning lines, want 16 and one saying there are too many:\n%s", lines, buf.String())
	}
}
