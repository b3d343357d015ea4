package metanode

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// errNotProposed is an attempt that certainly did not append the command
// (the leader dropped it, or its entry was overwritten by another
// leader's): Propose tries again.
var errNotProposed = errors.New("metanode: not proposed")

// notLeaderError is a node's answer that it is not the leader, with the
// leader it knows of.
type notLeaderError struct{ leader int32 }

func (e *notLeaderError) Error() string {
	return fmt.Sprintf("metanode: not the metadata leader (leader %d)", e.leader)
}

// Propose has the metadata leader check cmd against its applied state,
// propose its records as one entry and wait for it to apply. On a node
// that is not the leader it forwards cmd to the leader, and once the
// leader has answered waits (within ctx) for the local copy to apply it
// too, so that a Read right after sees the change.
//
// The error is a *meta.Error when the command is refused, by the check or
// by Apply when another entry got there first (the state is unchanged,
// ErrorCode gives the Kafka code); ErrNoLeader when no leader took the
// command before ctx ended; ErrOutcomeUnknown when one took it but ctx
// ended first; ErrStopped once the node stops.
func (n *Node) Propose(ctx context.Context, cmd Command) (Result, error) {
	if err := cmd.validate(); err != nil {
		return Result{}, err
	}
	done, ok := n.running()
	if !ok {
		return Result{}, ErrStopped
	}
	hint := NoLeader // the leader a peer named in its refusal
	probe := 0
	for {
		target := n.Leader()
		if hint != NoLeader {
			target, hint = hint, NoLeader
		}
		if target == NoLeader && !n.voter {
			// An observer without news of a leader asks the voters in
			// turn; the one it asks names the leader if it knows one.
			ids := n.voterIDs()
			target = ids[probe%len(ids)]
			probe++
		}
		var res Result
		var err error
		switch {
		case target == NoLeader:
			err = errNotProposed
		case target == n.cfg.ID:
			res, err = n.raft.submit(ctx, cmd)
		default:
			res, err = n.forward(ctx, target, cmd)
			if err == nil {
				_ = n.WaitApplied(ctx, res.Index)
			}
		}
		var nl *notLeaderError
		switch {
		case err == nil:
			return res, nil
		case errors.As(err, &nl):
			if nl.leader != target {
				hint = nl.leader
			}
		case !errors.Is(err, errNotProposed):
			return res, err
		}
		select {
		case <-ctx.Done():
			return Result{}, fmt.Errorf("%w: %v", ErrNoLeader, ctx.Err())
		case <-done:
			return Result{}, ErrStopped
		case <-time.After(n.retryPause()):
		}
	}
}
