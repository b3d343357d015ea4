package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/coordinator"
	"github.com/moonmq/moonmq/internal/testcluster"
)

// moveWithin bounds how long a move may take to finish once its fault is
// healed; a move still in progress then is reported as a problem.
const moveWithin = 90 * time.Second

// How a move step disturbs the move it starts.
const (
	movePlain      = iota // nothing: the move runs under the workload
	moveKillTarget        // SIGKILL the target group's leader while it copies
	moveKillSource        // SIGKILL the source group's leader mid-move
	moveZombie            // SIGSTOP the source's leader past the cut-over
	moveWays
)

// move moves a partition between the step's group and another, disturbed
// as the step's pick decides, waits for the move to finish and says what
// happened. The partition is one of the data topic's, or (a third of the
// time each) the one of __consumer_offsets holding the workload's
// consumer group or the one of __transaction_state holding its
// transactional id: their coordinators' state must follow them. A zombie
// source leader, paused while its group fails over, fences and hands the
// partition over, must not append to it when it wakes: the checker then
// finds any record it acknowledged missing.
func (in *injector) move(s Step, rng *rand.Rand, e *Event) string {
	adm := in.c.Admin()
	defer adm.Close()
	cl := in.c.Client()
	defer cl.Close()
	topic, part, source, target, why := in.pickMove(rng, adm)
	if why != "" {
		return why
	}
	var replicas []int32
	for _, r := range in.c.InGroup(target) {
		replicas = append(replicas, int32(r.ID))
	}
	how := rng.IntN(moveWays)
	what := fmt.Sprintf("%s/%d g%d→g%d", topic, part, source+1, target+1)

	begin := time.Now()
	if err := alterAssignment(cl, topic, part, replicas); err != nil {
		return fmt.Sprintf("move %s not started: %v", what, err)
	}
	var disturbed string
	switch how {
	case moveKillTarget, moveKillSource:
		g, who := target, "target"
		if how == moveKillSource {
			g, who = source, "source"
		}
		sleep(time.Duration(rng.Int64N(int64(500 * time.Millisecond))))
		l, _ := in.c.ServingLeaderOf(g)
		if l == nil {
			disturbed = fmt.Sprintf("; no %s leader to kill", who)
			break
		}
		e.Targets = append(e.Targets, l.ID)
		l.Kill()
		sleep(s.Hold)
		in.start(l)
		disturbed = fmt.Sprintf("; killed the %s's leader %d mid-move, down %v", who, l.ID, s.Hold.Round(time.Millisecond))
	case moveZombie:
		l, _ := in.c.ServingLeaderOf(source)
		if l == nil {
			disturbed = "; no source leader to pause"
			break
		}
		e.Targets = append(e.Targets, l.ID)
		l.Pause()
		// Long enough for the source group to elect another leader,
		// which fences the partition, and for the cut-over.
		hold := max(s.Hold, 5*time.Second)
		sleep(hold)
		l.Resume()
		disturbed = fmt.Sprintf("; paused the source's leader %d for %v (a zombie past the cut-over)", l.ID, hold.Round(time.Millisecond))
	}
	err := testcluster.Poll(moveWithin, func() (bool, string) {
		n, err := movesOf(cl, topic, part)
		if err != nil {
			return false, err.Error()
		}
		if n > 0 {
			return false, "still listed as moving"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		md, err := adm.ListTopicsWithInternal(ctx, topic)
		cancel()
		if err != nil {
			return false, err.Error()
		}
		p, ok := md[topic].Partitions[part]
		if !ok || p.Leader < 0 || in.groupOf[int(p.Leader)] != target {
			return false, fmt.Sprintf("leader %d", p.Leader)
		}
		return true, ""
	})
	if err != nil {
		in.mu.Lock()
		in.problems = append(in.problems, fmt.Sprintf("the move of %s did not finish within %v: %v", what, moveWithin, err))
		in.mu.Unlock()
		return fmt.Sprintf("moved %s: not finished%s: %v", what, disturbed, err)
	}
	return fmt.Sprintf("moved %s in %v%s", what, time.Since(begin).Round(time.Millisecond), disturbed)
}

// pickMove chooses the partition a move step moves, its owner and the
// group it goes to; why says why there is none.
func (in *injector) pickMove(rng *rand.Rand, adm *kadm.Client) (topic string, part int32, source, target int, why string) {
	topic, key := dataTopic, ""
	switch rng.IntN(6) {
	case 0:
		topic, key = "__consumer_offsets", groupName
	case 1:
		topic, key = "__transaction_state", txnID
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	md, err := adm.ListTopicsWithInternal(ctx, topic)
	cancel()
	if err != nil || md[topic].Err != nil || len(md[topic].Partitions) == 0 {
		return "", 0, 0, 0, fmt.Sprintf("skipped: no metadata of %s: %v", topic, err)
	}
	var others []int
	for g := range in.groups() {
		if g != in.group {
			others = append(others, g)
		}
	}
	if len(others) == 0 {
		return "", 0, 0, 0, "skipped: one group only"
	}
	if key != "" {
		// The coordinator's partition moves from whichever group owns
		// it to another.
		part = coordinator.PartitionFor(key, len(md[topic].Partitions))
		p := md[topic].Partitions[part]
		if p.Leader < 0 {
			return "", 0, 0, 0, fmt.Sprintf("skipped: %s/%d has no leader now", topic, part)
		}
		source = in.groupOf[int(p.Leader)]
		target = (source + 1 + rng.IntN(in.groups()-1)) % in.groups()
		return topic, part, source, target, ""
	}
	// A partition of the step's group moves to another group; when the
	// step's group owns none, one moves into it.
	owner := map[int32]int{}
	var mine, theirs []int32
	for _, p := range md[topic].Partitions.Sorted() {
		if p.Leader < 0 {
			continue
		}
		owner[p.Partition] = in.groupOf[int(p.Leader)]
		if owner[p.Partition] == in.group {
			mine = append(mine, p.Partition)
		} else {
			theirs = append(theirs, p.Partition)
		}
	}
	switch {
	case len(mine) > 0:
		part = mine[rng.IntN(len(mine))]
		return topic, part, in.group, others[rng.IntN(len(others))], ""
	case len(theirs) > 0:
		part = theirs[rng.IntN(len(theirs))]
		return topic, part, owner[part], in.group, ""
	}
	return "", 0, 0, 0, fmt.Sprintf("skipped: no partition of %s has a leader now", topic)
}

// alterAssignment asks for a partition's move to the brokers replicas,
// retrying retriable refusals for up to 30 s.
func alterAssignment(cl kmsgRequester, topic string, part int32, replicas []int32) error {
	req := kmsg.NewPtrAlterPartitionAssignmentsRequest()
	req.Topics = []kmsg.AlterPartitionAssignmentsRequestTopic{{Topic: topic,
		Partitions: []kmsg.AlterPartitionAssignmentsRequestTopicPartition{{Partition: part, Replicas: replicas}}}}
	var last error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := req.RequestWith(ctx, cl)
		cancel()
		if err != nil {
			last = err
			continue
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			last = err
			continue
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return errors.New("an answer without the partition")
		}
		rp := resp.Topics[0].Partitions[0]
		err = kerr.ErrorForCode(rp.ErrorCode)
		if err == nil {
			return nil
		}
		if rp.ErrorMessage != nil {
			err = fmt.Errorf("%w: %s", err, *rp.ErrorMessage)
		}
		if !kerr.IsRetriable(kerr.ErrorForCode(rp.ErrorCode)) {
			return err
		}
		last = err
	}
	return last
}

// movesOf is how many moves of topic's partition part are listed.
func movesOf(cl kmsgRequester, topic string, part int32) (int, error) {
	req := kmsg.NewPtrListPartitionReassignmentsRequest()
	req.Topics = []kmsg.ListPartitionReassignmentsRequestTopic{{Topic: topic, Partitions: []int32{part}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range resp.Topics {
		n += len(t.Partitions)
	}
	return n, nil
}

// kmsgRequester issues a request (a kgo.Client).
type kmsgRequester interface {
	Request(context.Context, kmsg.Request) (kmsg.Response, error)
}

// groups is the number of replication groups.
func (in *injector) groups() int {
	n := 0
	for _, g := range in.groupOf {
		n = max(n, g+1)
	}
	return max(n, 1)
}
