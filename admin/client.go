package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client calls the admin API of a process (what `sluice ctl` uses).
type Client struct {
	// Base is the API's URL, e.g. http://127.0.0.1:7070.
	Base string
	// Token is the bearer token for changes.
	Token string
	// Who names the caller in the jobs' histories (X-Sluice-Who).
	Who string
	// HTTP is the client to use. Default http.DefaultClient.
	HTTP *http.Client
}

// APIError is an answer of the API other than 200.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("admin: %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.Base, "/")+path, rd)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.Who != "" {
		req.Header.Set("X-Sluice-Who", c.Who)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("admin: %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		return &APIError{Status: resp.StatusCode, Message: e.Error}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("admin: %s %s: the answer: %w", method, path, err)
	}
	return nil
}

func esc(s string) string { return url.PathEscape(s) }

// Jobs lists the jobs.
func (c *Client) Jobs(ctx context.Context) ([]JobSummary, error) {
	var out []JobSummary
	return out, c.call(ctx, http.MethodGet, "/v1/jobs", nil, &out)
}

// Status is a job's status.
func (c *Client) Status(ctx context.Context, job string) (JobStatus, error) {
	var out JobStatus
	return out, c.call(ctx, http.MethodGet, "/v1/jobs/"+esc(job), nil, &out)
}

// History is a job's events.
func (c *Client) History(ctx context.Context, job string) ([]Event, error) {
	var out []Event
	return out, c.call(ctx, http.MethodGet, "/v1/jobs/"+esc(job)+"/history", nil, &out)
}

// SetInput changes an operator's input; fields left zero keep their
// value (see the API).
func (c *Client) SetInput(ctx context.Context, job, op string, in Input) (Input, error) {
	var out struct{ Input Input }
	err := c.call(ctx, http.MethodPut, "/v1/jobs/"+esc(job)+"/inputs/"+esc(op), in, &out)
	return out.Input, err
}

// Pause pauses a source (or resumes it, pause false).
func (c *Client) Pause(ctx context.Context, job, source string, pause bool) error {
	verb := "resume"
	if pause {
		verb = "pause"
	}
	return c.call(ctx, http.MethodPost, "/v1/jobs/"+esc(job)+"/sources/"+esc(source)+"/"+verb, nil, nil)
}

// Savepoint takes a checkpoint now and returns its id.
func (c *Client) Savepoint(ctx context.Context, job string) (uint64, error) {
	var out struct{ Checkpoint uint64 }
	err := c.call(ctx, http.MethodPost, "/v1/jobs/"+esc(job)+"/savepoint", nil, &out)
	return out.Checkpoint, err
}

// SavepointTo takes a checkpoint now and writes it as a savepoint into the
// new directory dir (one name) under the server's Options.SavepointDir;
// it returns the checkpoint's id and the savepoint's path.
func (c *Client) SavepointTo(ctx context.Context, job, dir string) (uint64, string, error) {
	var out struct {
		Checkpoint uint64
		Dir        string
	}
	err := c.call(ctx, http.MethodPost, "/v1/jobs/"+esc(job)+"/savepoint", map[string]string{"dir": dir}, &out)
	return out.Checkpoint, out.Dir, err
}

// Stop drains a job and returns its final checkpoint.
func (c *Client) Stop(ctx context.Context, job string) (uint64, error) {
	var out struct{ Checkpoint uint64 }
	err := c.call(ctx, http.MethodPost, "/v1/jobs/"+esc(job)+"/stop", nil, &out)
	return out.Checkpoint, err
}

// Push sends a desired-state document (JSON) to apply; a rejection is an
// *APIError with status 409 whose message names the field.
func (c *Client) Push(ctx context.Context, doc []byte) (DesiredStatus, error) {
	var out DesiredStatus
	return out, c.call(ctx, http.MethodPut, "/v1/desired", json.RawMessage(doc), &out)
}

// Desired is the desired state's status.
func (c *Client) Desired(ctx context.Context) (DesiredStatus, error) {
	var out DesiredStatus
	return out, c.call(ctx, http.MethodGet, "/v1/desired", nil, &out)
}

// StopWithSavepoint stops a job with a savepoint written into the new
// directory dir (one name) under the server's Options.SavepointDir; it
// returns the final checkpoint's id and the savepoint's path.
func (c *Client) StopWithSavepoint(ctx context.Context, job, dir string) (uint64, string, error) {
	var out struct {
		Checkpoint uint64
		Savepoint  string
	}
	err := c.call(ctx, http.MethodPost, "/v1/jobs/"+esc(job)+"/stop", map[string]string{"savepoint": dir}, &out)
	return out.Checkpoint, out.Savepoint, err
}

// Rescale changes the parallelism of a job's operators (by name): the
// server stops it with a savepoint and starts it again from it (see
// Server.Rescale).
func (c *Client) Rescale(ctx context.Context, job string, par map[string]int) (Rescaled, error) {
	var out Rescaled
	err := c.call(ctx, http.MethodPost, "/v1/jobs/"+esc(job)+"/rescale", map[string]any{"parallelism": par}, &out)
	return out, err
}

// SetLatencyTarget changes a job's LatencyTarget (the job must have been
// started with one).
func (c *Client) SetLatencyTarget(ctx context.Context, job string, d time.Duration) error {
	return c.call(ctx, http.MethodPut, "/v1/jobs/"+esc(job)+"/latency-target", map[string]string{"target": d.String()}, nil)
}
