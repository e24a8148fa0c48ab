// Package desired is the pure core of sluice's declarative control plane
// (DESIGN.md, Control plane): the versioned document of desired settings,
// its validation against what a process runs, and the machine that applies
// a version whole or rejects it whole, as an xDS client acknowledges or
// rejects a push.
//
// Nothing here does I/O. The caller (package admin) reads the document,
// builds a View of its jobs, feeds events to Machine.Step and carries out
// the actions it returns: apply a version's changes in order, roll back
// the ones done when one fails, acknowledge or reject.
//
// The document, in JSON:
//
//	{
//	  "version": 3,
//	  "jobs": {
//	    "q5": {
//	      "latency_target": "250ms",
//	      "operators": {
//	        "bids":  {"paused": false},
//	        "count": {"input": {"policy": "drop-oldest", "capacity": 4096}}
//	      }
//	    }
//	  }
//	}
//
// An input's fields are policy (block, drop-newest, drop-oldest, sample,
// throttle, spill), capacity (records, required), sample_every (sample: keep
// one in N, at least 2), rate (throttle: records per second) and high_water
// (sample, throttle: the depth above which they shed; default three
// quarters of the capacity). A job's latency_target (a Go duration, up to
// an hour) changes the LatencyTarget of a job started with one.
package desired

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Document is one version of the desired settings.
type Document struct {
	// Version orders documents: a process applies a version greater than
	// the last it applied or rejected, and ignores older ones.
	Version uint64         `json:"version"`
	Jobs    map[string]Job `json:"jobs"`
}

// Job is the desired settings of one job's operators, by name.
type Job struct {
	// LatencyTarget, when set, is the job's LatencyTarget: a Go duration
	// ("250ms"), for a job started with one.
	LatencyTarget string              `json:"latency_target,omitempty"`
	Operators     map[string]Operator `json:"operators"`
}

// Operator is the desired settings of one operator: the input mailbox of
// an operator that heads a chain, or whether a source is paused.
type Operator struct {
	Input  *Input `json:"input,omitempty"`
	Paused *bool  `json:"paused,omitempty"`
}

// Input is an input mailbox's settings.
type Input struct {
	Policy      string  `json:"policy"`
	Capacity    int     `json:"capacity"`
	SampleEvery int     `json:"sample_every,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	HighWater   int     `json:"high_water,omitempty"`
}

// MaxDocument is the largest document Parse reads.
const MaxDocument = 1 << 20

// ErrDocument is wrapped by every error of Parse.
var ErrDocument = errors.New("desired: document")

// Parse reads a document: one JSON object, at most MaxDocument bytes, with
// no field it does not know. Its errors name the source and the field or
// the byte offset.
func Parse(source string, data []byte) (Document, error) {
	var doc Document
	if len(data) > MaxDocument {
		return doc, fmt.Errorf("%w %s: %d bytes: larger than %d", ErrDocument, source, len(data), MaxDocument)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			return Document{}, fmt.Errorf("%w %s: field %s: %s is not %s (offset %d)", ErrDocument, source, te.Field, te.Value, te.Type, te.Offset)
		case errors.As(err, &se):
			return Document{}, fmt.Errorf("%w %s: offset %d: %v", ErrDocument, source, se.Offset, err)
		}
		return Document{}, fmt.Errorf("%w %s: %v", ErrDocument, source, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Document{}, fmt.Errorf("%w %s: offset %d: more after the document", ErrDocument, source, dec.InputOffset())
	}
	if doc.Version == 0 {
		return Document{}, fmt.Errorf("%w %s: field version: missing or 0 (versions start at 1)", ErrDocument, source)
	}
	return doc, nil
}
