package metanode

import (
	"context"
	"time"

	"github.com/moonmq/moonmq/internal/cluster/meta"
)

// registration is the command registering this broker with a lease of
// lease past the leader's now.
func (n *Node) registration(lease time.Duration) Command {
	return Command{RegisterBroker: &RegisterBroker{
		Record: meta.RegisterBrokerRecord{
			BrokerID:           n.cfg.ID,
			GroupID:            n.cfg.GroupID,
			IncarnationID:      n.incarnation,
			ClientAddress:      n.cfg.ClientAddress,
			ReplicationAddress: n.cfg.ReplicationAddress,
			Machine:            n.cfg.Machine,
		},
		LeaseMs: lease.Milliseconds(),
	}}
}

// renewLease registers the broker, then renews its lease every
// LeaseInterval, until ctx ends. A registration refused because this
// broker id's previous incarnation still holds a lease (a restart within
// it) is tried again until that lease runs out.
func (n *Node) renewLease(ctx context.Context) {
	var failing string
	for ctx.Err() == nil {
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, n.cfg.LeaseInterval)
		res, err := n.Propose(pctx, n.registration(n.cfg.LeaseDuration))
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			if r, ok := res.Records[0].(meta.RegisterBrokerRecord); ok {
				n.setStatus(func(s *Status) { s.LeaseExpiryMs = r.LeaseExpiryMs })
			}
			if failing != "" {
				n.log.Info("metadata: broker lease renewed again")
				failing = ""
			}
		case err.Error() != failing:
			n.log.Warn("metadata: registering this broker failed; trying again", "err", err)
			failing = err.Error()
		}
		sleep(ctx, max(n.cfg.LeaseInterval-time.Since(start), n.retryPause()))
	}
}

// endLease asks, within ShutdownTimeout, that this broker's lease end now,
// so that clients stop being sent to it before it would have run out.
func (n *Node) endLease() {
	if _, ok := n.running(); !ok || n.Status().LeaseExpiryMs == 0 {
		return // ended by its context, or never registered: nothing to shorten
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ShutdownTimeout)
	defer cancel()
	if _, err := n.Propose(ctx, n.registration(0)); err != nil {
		n.log.Warn("metadata: could not end this broker's lease at shutdown; it runs out by itself", "err", err)
		return
	}
	n.setStatus(func(s *Status) { s.LeaseExpiryMs = 0 })
}
