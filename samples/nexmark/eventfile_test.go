package nexmark

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func TestEventFileKeyOrder(t *testing.T) {
	for _, c := range []struct {
		ev   Event
		want string
	}{
		{Event{Person: &Person{ID: 1000, Name: "Peter Jones", EmailAddress: "a@b.com", CreditCard: "0001 0002 0003 0004", City: "Bend", State: "OR", DateTime: 1436918400000, Extra: `x\y"z`}},
			`{"type":"person","id":1000,"name":"Peter Jones","emailAddress":"a@b.com","creditCard":"0001 0002 0003 0004","city":"Bend","state":"OR","dateTime":1436918400000,"extra":"x\\y\"z"}`},
		{Event{Auction: &Auction{ID: 1001, ItemName: "it", Description: "desc", InitialBid: 100, Reserve: 250, DateTime: 5, Expires: 9, Seller: 1000, Category: 10, Extra: ""}},
			`{"type":"auction","id":1001,"itemName":"it","description":"desc","initialBid":100,"reserve":250,"dateTime":5,"expires":9,"seller":1000,"category":10,"extra":""}`},
		{Event{Bid: &Bid{Auction: 1000, Bidder: 1001, Price: -3, DateTime: 7, Extra: "HI`_^"}},
			`{"type":"bid","auction":1000,"bidder":1001,"price":-3,"dateTime":7,"extra":"HI` + "`" + `_^"}`},
		{Event{}, `{}`},
	} {
		if got := string(AppendJSON(nil, c.ev)); got != c.want {
			t.Errorf("AppendJSON:\n got %s\nwant %s", got, c.want)
		}
	}
}

func TestEventFileEscapesLikeEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", `q"b\s/`, "\x00\x01\x1f\t\n\r\x7f", "é ü 世界 😀", "bad \xff\xfe utf8 \xe2\x82", "\u2028\u2029", "<&>", "\xed\xa0\x80"} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got := string(jsonAppendString(nil, s)) + "\n"; got != want.String() {
			t.Errorf("jsonAppendString(%q) = %s, encoding/json %s", s, got, want.String())
		}
	}
}

func TestEventFileRoundTrip(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NumEvents = 10_000
	cfg.NumEventGenerators = 3
	want := collectEvents(t, mustStream(t, cfg).Next)
	var file bytes.Buffer
	w := NewWriter(&file)
	for _, ev := range want {
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(file.Bytes(), []byte("\n")); n != len(want) {
		t.Fatalf("%d lines, want %d", n, len(want))
	}
	// Read through a reader that returns one byte at a time, to exercise
	// lines split across reads.
	r := NewReader(iotest.OneByteReader(bytes.NewReader(file.Bytes())), ReaderOptions{})
	got := make([]Event, 0, len(want))
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("events read back differ from those written")
	}
	// Every generated line is also valid JSON for encoding/json, with the
	// same strings.
	for i, line := range bytes.Split(bytes.TrimSuffix(file.Bytes(), []byte("\n")), []byte("\n"))[:200] {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("line %d: encoding/json: %v", i+1, err)
		}
		if m["extra"] != eventExtra(want[i]) {
			t.Fatalf("line %d: encoding/json reads extra %q", i+1, m["extra"])
		}
	}
}

func eventExtra(ev Event) string {
	switch {
	case ev.Person != nil:
		return ev.Person.Extra
	case ev.Auction != nil:
		return ev.Auction.Extra
	}
	return ev.Bid.Extra
}

func TestEventFileReaderErrors(t *testing.T) {
	good := `{"type":"bid","auction":1000,"bidder":1001,"price":5,"dateTime":7,"extra":""}`
	for _, c := range []struct {
		line, want string
	}{
		{`{"type":"bidd","auction":1}`, `event file line 2: malformed event: unknown type "bidd" (want person, auction or bid)`},
		{`{"auction":1000}`, `line 2: malformed event: missing key "type"`},
		{`{"type":"bid","auction":1000,"bidder":1001,"price":5,"dateTime":7}`, `line 2: malformed event: bid: missing key "extra"`},
		{`{"type":"bid","auction":1000,"bidder":1001,"price":5.5,"dateTime":7,"extra":""}`, `line 2: malformed event: key "price": want an integer, got 5.5`},
		{`{"type":"bid","auction":"1000"}`, `line 2: malformed event: key "auction": want an integer`},
		{`{"type":7}`, `line 2: malformed event: key "type": want a string`},
		{`{"type":"bid",`, `line 2: malformed event: invalid JSON: want a string, found end of line`},
		{`{"type":"bid"} x`, `line 2: malformed event: invalid JSON: want the end of the line after the object, found 'x' at column 16`},
		{`[1,2]`, `line 2: malformed event: invalid JSON: want an object '{', found '[' at column 1`},
		{`{"type":"bid","auction":99999999999999999999}`, `line 2: malformed event: key "auction": 99999999999999999999 does not fit 64 bits`},
		{`{"type":"b` + "\x01" + `id"}`, `line 2: malformed event: invalid JSON: control character 0x01 in a string at column 11`},
		{`{"type":"bid","auction":01}`, `line 2: malformed event: invalid JSON: number "01" has a leading zero`},
	} {
		r := NewReader(strings.NewReader(good+"\n"+c.line+"\n"+good+"\n"), ReaderOptions{})
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
		_, err := r.Next()
		var le *LineError
		if !errors.As(err, &le) || le.Line != 2 || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("line %s:\n got %v\nwant an ErrMalformed *LineError on line 2 containing %s", c.line, err, c.want)
		}

		r = NewReader(strings.NewReader(good+"\n"+c.line+"\n"+good+"\n"), ReaderOptions{SkipMalformed: true})
		n := 0
		for {
			_, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("SkipMalformed: %v", err)
			}
			n++
		}
		if n != 2 || r.Skipped() != 1 || r.Line() != 3 {
			t.Errorf("SkipMalformed over %s: %d events, %d skipped, %d lines; want 2, 1, 3", c.line, n, r.Skipped(), r.Line())
		}
	}
}

func TestEventFileReaderLenient(t *testing.T) {
	in := "\n" + // a blank line
		`  { "extra" : "a\u00e9\ud83d\ude00\/" , "dateTime":7,"price":5,"bidder":1001,"auction":1000,"type":"bid", "note":{"x":[1,-2.5e3,true,null,"s"]}}  ` + "\r\n" +
		`{"type":"bid","auction":1,"bidder":2,"price":3,"dateTime":4,"extra":"last line, no newline"}`
	r := NewReader(strings.NewReader(in), ReaderOptions{})
	ev, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if want := (Bid{Auction: 1000, Bidder: 1001, Price: 5, DateTime: 7, Extra: "aé😀/"}); ev.Bid == nil || *ev.Bid != want {
		t.Errorf("got %+v, want %+v", ev.Bid, want)
	}
	if ev, err = r.Next(); err != nil || ev.Bid.Extra != "last line, no newline" || r.Line() != 3 {
		t.Errorf("last line: %+v, %v, line %d", ev.Bid, err, r.Line())
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("after the last line: %v, want io.EOF", err)
	}
}

func TestEventFileReaderLongLine(t *testing.T) {
	ev := Event{Bid: &Bid{Auction: 1, Bidder: 2, Price: 3, DateTime: 4, Extra: strings.Repeat("x", 600<<10)}}
	file := append(AppendJSON(nil, ev), '\n')
	file = append(append(file, AppendJSON(nil, ev)...), '\n')
	r := NewReader(bytes.NewReader(file), ReaderOptions{})
	for i := range 2 {
		got, err := r.Next()
		if err != nil || !reflect.DeepEqual(got, ev) {
			t.Fatalf("long line %d: %v", i+1, err)
		}
	}
}

type eventFileFailingReader struct{}

func (eventFileFailingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestEventFileReaderIOError(t *testing.T) {
	r := NewReader(eventFileFailingReader{}, ReaderOptions{SkipMalformed: true})
	if _, err := r.Next(); err == nil || errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("Next = %v, want the I/O error", err)
	}
}

func FuzzDecodeLine(f *testing.F) {
	cfg := DefaultConfig()
	cfg.NumEvents = 60
	cfg.NumEventGenerators = 1
	for ev := range mustStream(f, cfg).All() {
		f.Add(AppendJSON(nil, ev))
	}
	for _, s := range []string{
		`{}`, `{"type":"bid"}`, `{"type":"person","id":1,"name":"\ud800","emailAddress":"\u00e9","creditCard":"","city":"","state":"","dateTime":-0,"extra":"\\\""}`,
		`{"type":"bid","auction":1,"bidder":2,"price":3,"dateTime":4,"extra":"","x":[{"y":[]}]}`,
		`{"type":"bid","auction":1e3}`, `{"type":"bid","auction":-}`, "{\"type\":\"\xff\"}", `[[[[`, `"s"`, ` `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := DecodeLine(line)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if !json.Valid(line) {
			t.Fatalf("accepted invalid JSON %q", line)
		}
		if eventKind(ev) == "none" {
			t.Fatalf("accepted %q as an empty event", line)
		}
		// What was read writes back to a line that reads the same.
		again, err := DecodeLine(AppendJSON(nil, ev))
		if err != nil || !reflect.DeepEqual(again, ev) {
			t.Fatalf("round trip of %q: %+v, %v", line, again, err)
		}
	})
}

func BenchmarkEventFileAppendJSON(b *testing.B) {
	evs := collectEvents(b, mustStream(b, oneGeneratorConfig(1000)).Next)
	buf := make([]byte, 0, 1024)
	var n int
	b.ReportAllocs()
	for b.Loop() {
		for _, ev := range evs {
			buf = AppendJSON(buf[:0], ev)
			n += len(buf)
		}
	}
	b.ReportMetric(float64(b.N)*float64(len(evs))/b.Elapsed().Seconds(), "events/s")
	b.SetBytes(int64(n / b.N))
}

func BenchmarkEventFileRead(b *testing.B) {
	evs := collectEvents(b, mustStream(b, oneGeneratorConfig(1000)).Next)
	var file bytes.Buffer
	w := NewWriter(&file)
	for _, ev := range evs {
		if err := w.Write(ev); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(file.Len()))
	b.ReportAllocs()
	for b.Loop() {
		r := NewReader(bytes.NewReader(file.Bytes()), ReaderOptions{})
		for {
			if _, err := r.Next(); err != nil {
				if err != io.EOF {
					b.Fatal(err)
				}
				break
			}
		}
	}
	b.ReportMetric(float64(b.N)*float64(len(evs))/b.Elapsed().Seconds(), "events/s")
}
