package graph

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Fingerprint identifies the topology's logical graph whatever its
// parallelism: every operator's name, kind, input and output types, state
// types and inputs, in order. A savepoint records it, and a job starts from
// a savepoint only with the same fingerprint: the same operators, wired the
// same way, keeping state of the same types; parallelism, fusion, mailboxes
// and run settings may differ.
func (t *Topology) Fingerprint() string {
	h := sha256.New()
	for _, n := range t.nodes {
		fmt.Fprintf(h, "%q %q in=%v out=%v part=%d state=%v inputs=[", n.name, n.kind, n.inType, n.outType, n.partition, n.stateTypes)
		for _, in := range n.inputs {
			fmt.Fprintf(h, "%q ", in.name)
		}
		fmt.Fprint(h, "]\n")
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
