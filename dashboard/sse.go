package dashboard

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"time"
)

// writeTimeout bounds each write to an event stream: a client that stops
// reading does not hold its handler, or Close, for longer.
const writeTimeout = 10 * time.Second

// writeEvent writes one Server-Sent Event: its type, its id and its data,
// one "data:" line per line of data, ended by a blank line.
func writeEvent(w io.Writer, event string, id uint64, data []byte) error {
	var b bytes.Buffer
	b.Grow(len(data) + 64)
	if event != "" {
		b.WriteString("event: ")
		b.WriteString(event)
		b.WriteByte('\n')
	}
	b.WriteString("id: ")
	b.WriteString(strconv.FormatUint(id, 10))
	b.WriteByte('\n')
	for line := range bytes.Lines(data) {
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		b.WriteString("data: ")
		b.Write(line)
		b.WriteByte('\n')
	}
	if len(data) == 0 {
		b.WriteString("data: \n")
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

// serveEvents streams every snapshot the dashboard publishes as a
// "snapshot" event, starting with the latest. It returns when the client
// goes away, a write fails, or the dashboard closes.
func (d *Dashboard) serveEvents(w http.ResponseWriter, r *http.Request) {
	if ok, why := d.streamStarted(); !ok {
		w.Header().Set("Retry-After", "5")
		http.Error(w, why, http.StatusServiceUnavailable)
		return
	}
	defer d.streamEnded()

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // a reverse proxy must not buffer the stream
	w.WriteHeader(http.StatusOK)
	// Reconnect after a second when the stream breaks.
	if _, err := io.WriteString(w, "retry: 1000\n\n"); err != nil {
		return
	}
	var sent uint64
	for {
		data, seq, changed := d.latest()
		if seq != sent && data != nil {
			_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if err := writeEvent(w, "snapshot", seq, data); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			sent = seq
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-d.quit:
			return
		}
	}
}
