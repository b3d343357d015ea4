package replication

import (
	"container/heap"
	"time"
)

// caughtUpHeap holds one follower's positions, oldest since first. A
// follower is lagging when its oldest position is older than the ISR lag,
// and it is asked on every fetch: with a heap the question costs a look
// at the top, and a fetch re-sorts one entry, whatever the number of
// partitions.
type caughtUpHeap []*replicaPos

func (h caughtUpHeap) Len() int           { return len(h) }
func (h caughtUpHeap) Less(i, j int) bool { return h[i].since.Before(h[j].since) }
func (h caughtUpHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}

func (h *caughtUpHeap) Push(x any) {
	rp := x.(*replicaPos)
	rp.heapIdx = len(*h)
	*h = append(*h, rp)
}

func (h *caughtUpHeap) Pop() any {
	old := *h
	rp := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	rp.heapIdx = -1
	return rp
}

func (h *caughtUpHeap) push(rp *replicaPos) { heap.Push(h, rp) }

func (h *caughtUpHeap) remove(rp *replicaPos) {
	if rp != nil && rp.heapIdx >= 0 {
		heap.Remove(h, rp.heapIdx)
	}
}

// update recomputes rp's since after a fetch of p changed its catch-up
// time. It may move either way: a follower that lost data forgets when it
// was caught up.
func (h *caughtUpHeap) update(rp *replicaPos, p *partState) {
	var since time.Time
	if p.hasAppear {
		since = p.appeared
	}
	if rp.hasCaughtUp && rp.caughtUp.After(since) {
		since = rp.caughtUp
	}
	if !since.Equal(rp.since) {
		rp.since = since
		heap.Fix(h, rp.heapIdx)
	}
}

// oldest returns the earliest since, false if the follower has no
// positions (the group has no partitions).
func (h caughtUpHeap) oldest() (time.Time, bool) {
	if len(h) == 0 {
		return time.Time{}, false
	}
	return h[0].since, true
}
