package operators

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/supervision"
)

// HTTPOption configures an HTTP sink.
type HTTPOption func(*httpSinkConfig)

type httpSinkConfig struct {
	client      *http.Client
	ownClient   bool // the sink made the client: it closes its idle connections
	encode      func(any) ([]byte, error)
	contentType string
	keyPrefix   string
	header      http.Header
	attempts    int
	backoff     supervision.Backoff
	errs        []error
}

// HTTPClient sets the client that sends the requests (its timeouts, TLS
// configuration, transport). Default: a client of the sink's own with a
// 30 s overall timeout, 10 s to connect and for the TLS handshake, and no
// redirects (a 3xx fails the record).
func HTTPClient(c *http.Client) HTTPOption {
	return func(cfg *httpSinkConfig) {
		if c == nil {
			cfg.errs = append(cfg.errs, errors.New("nil HTTP client"))
		}
		cfg.client, cfg.ownClient = c, false
	}
}

// HTTPEncoder sets how a record becomes a request body, and the body's
// Content-Type. Default: encoding/json, "application/json". An encoding
// error fails the record.
func HTTPEncoder(contentType string, encode func(v any) ([]byte, error)) HTTPOption {
	return func(cfg *httpSinkConfig) {
		if encode == nil {
			cfg.errs = append(cfg.errs, errors.New("nil encoder"))
		}
		cfg.contentType, cfg.encode = contentType, encode
	}
}

// HTTPKeyPrefix sets the prefix of the Idempotency-Key header, typically
// "job/operator": the key of a record is PREFIX/PARTITION/SEQ, where SEQ
// counts the records of the sink partition from 0. Keys are then the same
// when a job is run again over the same input, or restored from a
// checkpoint (the sink's sequence numbers are part of the checkpoint), so an
// idempotent server drops the replayed records: exactly-once delivery. Give
// every job and sink its own prefix: two sinks with the same prefix writing
// to one server would have different records dropped as duplicates.
// Default: "sluice-" and 16 random hex digits, chosen when HTTP is called,
// so keys are stable across the retries of a record and within a process,
// but not across restarts of the process (at-least-once then).
func HTTPKeyPrefix(prefix string) HTTPOption {
	return func(cfg *httpSinkConfig) {
		if prefix == "" {
			cfg.errs = append(cfg.errs, errors.New("empty idempotency key prefix"))
		}
		cfg.keyPrefix = prefix
	}
}

// HTTPHeader adds a header to every request (an Authorization, say).
func HTTPHeader(key, value string) HTTPOption {
	return func(cfg *httpSinkConfig) { cfg.header.Add(key, value) }
}

// HTTPRetry bounds the attempts per record (the first included) and sets
// the backoff between them. Default: 5 attempts, 100 ms doubling to 30 s,
// equal jitter. The sink's instances share the backoff, so its random
// source must be safe for concurrent use (the default and
// supervision.SeededRand are). While a record waits for its next attempt
// the sink takes no other input: back-pressure reaches the sources.
func HTTPRetry(attempts int, backoff supervision.Backoff) HTTPOption {
	return func(cfg *httpSinkConfig) { cfg.attempts, cfg.backoff = attempts, backoff }
}

type httpSink[T any] struct {
	url     string
	cfg     *httpSinkConfig
	retryer *supervision.Retryer
	err     error // invalid configuration, reported by Open
}

// HTTP posts every record to url, one request per record, with an
// Idempotency-Key header that is unique per record and the same for every
// retry of it (see HTTPKeyPrefix). A 2xx response delivers the record. A
// transient failure (a network error, 408, 429 or 5xx) is retried with
// backoff (see HTTPRetry); any other status fails the record at once. A
// record that fails, permanently or after its last attempt, fails the
// sink's Write with an error naming the URL, the record's key, the status
// and the start of the response body; the records after it in the batch are
// not sent. Waits honour the job's context: stopping the job cancels them.
//
// The sink is at-least-once towards a server that ignores the key (a
// request whose response was lost is sent again), and exactly-once towards
// one that keeps the keys it has accepted and answers a repeated key with
// success. Configuration errors (a malformed URL, a bad option) are
// reported when the job starts.
func HTTP[T any](url string, opts ...HTTPOption) SinkConnector[T] {
	cfg := &httpSinkConfig{
		encode:      json.Marshal,
		contentType: "application/json",
		keyPrefix:   "sluice-" + strconv.FormatUint(rand.Uint64(), 16),
		header:      http.Header{},
		attempts:    supervision.DefaultMaxAttempts,
	}
	for _, o := range opts {
		if o == nil {
			cfg.errs = append(cfg.errs, errors.New("nil option"))
			continue
		}
		o(cfg)
	}
	s := &httpSink[T]{url: url, cfg: cfg}
	errs := cfg.errs
	if err := checkHTTPURL(url); err != nil {
		errs = append(errs, err)
	}
	r, err := supervision.NewRetryer(supervision.WithMaxAttempts(cfg.attempts), supervision.WithRetryBackoff(cfg.backoff))
	if err != nil {
		errs = append(errs, err)
	}
	s.retryer = r
	if cfg.client == nil {
		cfg.client, cfg.ownClient = defaultHTTPClient(), true
	}
	if len(errs) > 0 {
		s.err = fmt.Errorf("http sink %s: %w", url, errors.Join(errs...))
	}
	return s
}

func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("URL %q: want http:// or https:// and a host", s)
	}
	return nil
}

func defaultHTTPClient() *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 30 * time.Second,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConnsPerHost:   16,
			ForceAttemptHTTP2:     true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Open implements SinkConnector.
func (s *httpSink[T]) Open(ctx context.Context, part, parts int) (Writer[T], error) {
	if s.err != nil {
		return nil, s.err
	}
	return &httpWriter[T]{s: s, ctx: ctx, part: part}, nil
}

// OpenAt implements RestorableSink: the partition goes on numbering its
// records from its checkpointed sequence number, so that records replayed
// after a restore get the keys they had before.
func (s *httpSink[T]) OpenAt(ctx context.Context, part, parts int, state []byte) (Writer[T], error) {
	if s.err != nil {
		return nil, s.err
	}
	if len(state) != 8 {
		return nil, fmt.Errorf("http sink %s: partition %d: checkpointed state of %d bytes, want 8", s.url, part, len(state))
	}
	return &httpWriter[T]{s: s, ctx: ctx, part: part, seq: binary.BigEndian.Uint64(state)}, nil
}

type httpWriter[T any] struct {
	s    *httpSink[T]
	ctx  context.Context
	part int
	seq  uint64 // the sequence number of the next record
}

// IdempotencyKey is the Idempotency-Key header of the record with sequence
// number seq in partition part of a sink with key prefix prefix.
func IdempotencyKey(prefix string, part int, seq uint64) string {
	return prefix + "/" + strconv.Itoa(part) + "/" + strconv.FormatUint(seq, 10)
}

func (w *httpWriter[T]) Write(records []T) error {
	cfg := w.s.cfg
	for _, r := range records {
		// The key is used up even if the record fails: a record that fails
		// after an attempt the server did accept must not lend its key to
		// the next one.
		key := IdempotencyKey(cfg.keyPrefix, w.part, w.seq)
		w.seq++
		body, err := cfg.encode(r)
		if err != nil {
			return fmt.Errorf("http sink %s: record %s: encode %T: %w", w.s.url, key, r, err)
		}
		err = w.s.retryer.Do(w.ctx, func(ctx context.Context) error { return w.post(ctx, key, body) })
		if err != nil {
			return fmt.Errorf("http sink POST %s: record %s: %w", w.s.url, key, err)
		}
	}
	return nil
}

// HTTPStatusError is the error of a request that got a response other than
// 2xx: its status code and the start of its body.
type HTTPStatusError struct {
	StatusCode int
	Status     string
	Body       string // up to 512 bytes
}

func (e *HTTPStatusError) Error() string {
	if e.Body == "" {
		return "status " + e.Status
	}
	return fmt.Sprintf("status %s: %s", e.Status, e.Body)
}

// retryableStatus says whether a response with this status may succeed
// if the request is sent again.
func retryableStatus(code int) bool {
	return code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500 && code <= 599
}

func (w *httpWriter[T]) post(ctx context.Context, key string, body []byte) error {
	cfg := w.s.cfg
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.s.url, bytes.NewReader(body))
	if err != nil {
		return supervision.Permanent(err)
	}
	for k, vs := range cfg.header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", cfg.contentType)
	req.Header.Set("Idempotency-Key", key)
	resp, err := cfg.client.Do(req)
	if err != nil {
		return err // network errors are transient; the retryer checks ctx
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return nil
	}
	serr := &HTTPStatusError{StatusCode: resp.StatusCode, Status: resp.Status, Body: strings.TrimSpace(printable(head))}
	if retryableStatus(resp.StatusCode) {
		return serr
	}
	return supervision.Permanent(serr)
}

// printable keeps an error message readable whatever the body holds.
func printable(b []byte) string {
	if !utf8.Valid(b) {
		return "0x" + hex.EncodeToString(b[:min(len(b), 64)])
	}
	return string(b)
}

// Checkpoint implements Checkpointer: every record written so far has been
// delivered (Write returns only then); the state is the sequence number of
// the next record.
func (w *httpWriter[T]) Checkpoint() ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, w.seq), nil
}

// Close releases the idle connections of the sink's own client.
func (w *httpWriter[T]) Close() error {
	if w.s.cfg.ownClient {
		w.s.cfg.client.CloseIdleConnections()
	}
	return nil
}
