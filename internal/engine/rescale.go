package engine

import (
	"fmt"
	"maps"
	"strconv"

	"github.com/sluicehq/sluice/internal/graph"
	"github.com/sluicehq/sluice/internal/savepoint"
	"github.com/sluicehq/sluice/internal/stage"
	"github.com/sluicehq/sluice/persistence"
)

// Restoring a checkpoint onto the current plan (DESIGN.md, Checkpoints;
// docs/checkpoints.md, Rescaling). Every checkpoint records the plan that
// took it (savepoint.Plan under savepoint.PlanKey). An operator whose
// parallelism is the same restores instance by instance, as always. One
// whose parallelism changed:
//
//   - keeps state per key (KeyGrouped): new instance i of p restores the
//     keys of its key-group range from every old instance whose range
//     overlaps it (stage.KeyGroupRestorer);
//   - is a source: its connector redistributes its offsets
//     (connector.OffsetRescaler), or the restore is refused;
//   - is a sink whose connector redistributes its state
//     (connector.StateRescaler): new instance i restores what it returned;
//   - keeps other state (a sink's position): refused; without state: nothing
//     to do.
//
// A new instance counts as finished when every old instance of its chain's
// head had finished; the state of a finished old instance is not carried
// over (its keys have had their end of input).

// restoration is what a restored checkpoint says of the plan that took it.
type restoration struct {
	old     *savepoint.Plan     // nil: a checkpoint that records no plan (same layout assumed)
	offsets map[string][]int64  // rescaled sources: the offset of every new partition
	states  map[string][][]byte // rescaled sinks with a StateRescaler: the state of every new partition
}

// planRecord is the plan recorded in this job's checkpoints.
func (x *execution) planRecord() savepoint.Plan {
	p := savepoint.Plan{Version: savepoint.Version, Fingerprint: x.topo.Fingerprint(), Origin: x.origin}
	for _, chain := range x.plan.Chains {
		for _, n := range chain {
			p.Operators = append(p.Operators, savepoint.Operator{Name: n.Name(), Kind: n.Kind(), Parallelism: x.plan.Par[n],
				Head: chain[0].Name(), KeyGrouped: n.KeyGrouped(), Source: n.Role() == graph.RoleSource})
		}
	}
	return p
}

// withPlan is the checkpoint's states with this job's plan added.
func (x *execution) withPlan(states map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(states)+1)
	maps.Copy(out, states)
	out[savepoint.PlanKey] = x.planBytes
	return out
}

// adopt makes cp the checkpoint the next generation restores from, after
// checking that it can be restored onto this plan.
func (x *execution) adopt(cp *persistence.Checkpoint) error {
	x.restored, x.rest = nil, restoration{}
	if cp == nil {
		return nil
	}
	r, err := x.restorationOf(cp)
	if err != nil {
		return err
	}
	x.restored, x.rest = cp, r
	if r.old != nil && r.old.Origin != x.origin {
		x.origin = r.old.Origin
		x.planBytes = savepoint.EncodePlan(x.planRecord())
	}
	return nil
}

func (x *execution) restorationOf(cp *persistence.Checkpoint) (restoration, error) {
	where := fmt.Sprintf("job %q: checkpoint %d", x.topo.Name(), cp.ID)
	old, ok, err := savepoint.PlanOf(cp, where)
	if err != nil || !ok {
		return restoration{}, err
	}
	r := restoration{old: &old}
	for _, chain := range x.plan.Chains {
		for _, n := range chain {
			o, ok := old.Op(n.Name())
			par := x.plan.Par[n]
			if !ok || o.Parallelism == par {
				continue
			}
			switch {
			case n.Role() == graph.RoleSource:
				re := n.RescaleOffsets()
				if re == nil {
					return restoration{}, fmt.Errorf("%s: source %q ran at parallelism %d, now %d: its connector cannot redistribute its offsets (no connector.OffsetRescaler); run it at parallelism %d",
						where, n.Name(), o.Parallelism, par, o.Parallelism)
				}
				offs := make([]int64, o.Parallelism)
				for j := range offs {
					offs[j] = cp.Offsets[n.Name()+"/"+strconv.Itoa(j)]
				}
				nw, err := re(offs, par)
				if err != nil {
					return restoration{}, fmt.Errorf("%s: source %q from parallelism %d to %d: %w", where, n.Name(), o.Parallelism, par, err)
				}
				if len(nw) != par {
					return restoration{}, fmt.Errorf("%s: source %q from parallelism %d to %d: its connector returned %d offsets", where, n.Name(), o.Parallelism, par, len(nw))
				}
				if r.offsets == nil {
					r.offsets = map[string][]int64{}
				}
				r.offsets[n.Name()] = nw
			case n.KeyGrouped() && o.KeyGrouped:
			case n.Role() == graph.RoleSink && n.RescaleStates() != nil:
				old := make([][]byte, o.Parallelism)
				for j := range old {
					old[j] = cp.States[n.Name()+"/"+strconv.Itoa(j)]
				}
				nw, err := n.RescaleStates()(old, par)
				if err != nil {
					return restoration{}, fmt.Errorf("%s: sink %q from parallelism %d to %d: %w", where, n.Name(), o.Parallelism, par, err)
				}
				if len(nw) != par {
					return restoration{}, fmt.Errorf("%s: sink %q from parallelism %d to %d: its connector returned %d states", where, n.Name(), o.Parallelism, par, len(nw))
				}
				if r.states == nil {
					r.states = map[string][][]byte{}
				}
				r.states[n.Name()] = nw
			default:
				for j := range o.Parallelism {
					if b := cp.States[n.Name()+"/"+strconv.Itoa(j)]; len(b) > 0 {
						return restoration{}, fmt.Errorf("%s: operator %q ran at parallelism %d, now %d: its state is not per key (%d bytes in instance %d) and cannot be redistributed; run it at parallelism %d",
							where, n.Name(), o.Parallelism, par, len(b), j, o.Parallelism)
					}
				}
			}
		}
	}
	return r, nil
}

// rescaled returns the old operator of n when its parallelism changed.
func (x *execution) rescaled(n *graph.Node) (savepoint.Operator, bool) {
	if x.rest.old == nil {
		return savepoint.Operator{}, false
	}
	o, ok := x.rest.old.Op(n.Name())
	return o, ok && o.Parallelism != x.plan.Par[n]
}

// restoredFinished says whether instance idx of the chain headed by head
// had finished in the restored checkpoint.
func (x *execution) restoredFinished(head *graph.Node, idx int) bool {
	if x.restored == nil {
		return false
	}
	if x.rest.old == nil {
		return x.restored.Offsets[head.Name()+"/"+strconv.Itoa(idx)+"#finished"] != 0
	}
	o, ok := x.rest.old.Op(head.Name())
	if !ok {
		return false
	}
	if o.Parallelism == x.plan.Par[head] {
		return x.oldFinished(o, idx)
	}
	for j := range o.Parallelism {
		if !x.oldFinished(o, j) {
			return false
		}
	}
	return true
}

// oldFinished: instance j of old operator o had finished.
func (x *execution) oldFinished(o savepoint.Operator, j int) bool {
	return x.restored.Offsets[o.Head+"/"+strconv.Itoa(j)+"#finished"] != 0
}

// restoredOffset is where instance idx of source n starts.
func (x *execution) restoredOffset(n *graph.Node, idx int) int64 {
	if x.restored == nil {
		return 0
	}
	if offs, ok := x.rest.offsets[n.Name()]; ok {
		return offs[idx]
	}
	return x.restored.Offsets[n.Name()+"/"+strconv.Itoa(idx)]
}

// restoreRescaled restores into st the state of instance idx of n, whose
// parallelism changed (o is the old operator).
func (x *execution) restoreRescaled(n *graph.Node, o savepoint.Operator, idx int, st any) error {
	if !n.KeyGrouped() {
		return nil // checked by restorationOf: it had no state
	}
	kr, ok := st.(stage.KeyGroupRestorer)
	if !ok {
		return fmt.Errorf("its state cannot be redistributed by key group")
	}
	lo, hi := stage.KeyGroupRange(idx, x.plan.Par[n])
	var states [][]byte
	for j := range o.Parallelism {
		olo, ohi := stage.KeyGroupRange(j, o.Parallelism)
		if ohi <= lo || olo >= hi || x.oldFinished(o, j) {
			continue
		}
		if b, ok := x.restored.States[n.Name()+"/"+strconv.Itoa(j)]; ok {
			states = append(states, b)
		}
	}
	return kr.RestoreKeyGroups(states, lo, hi)
}
